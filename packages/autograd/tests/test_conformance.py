"""ember-core's autograd conformance kit, run on ember-autograd (with ember-core's reference partition)."""

from ember_autograd import AOTAutograd
from ember_core.testing import AutogradConformance


class TestAOTAutograd(AutogradConformance):
    autograd = AOTAutograd()
