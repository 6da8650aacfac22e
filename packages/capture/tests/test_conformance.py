"""ember-core's frontend conformance kit, run on both of ember-capture's frontends."""

from ember_capture import DynamoFrontend, TraceFrontend
from ember_core.testing import FrontendConformance


class TestDynamoFrontend(FrontendConformance):
    frontend = DynamoFrontend()
    backend = True
    splits_graphs = True


class TestTraceFrontend(FrontendConformance):
    frontend = TraceFrontend()  # no graph breaks: from a branch on a tensor's value on, the function runs eagerly
