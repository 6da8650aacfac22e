"""ember-capture's plugin, found through the entry-point group `ember` like any third party's."""

from __future__ import annotations

import ember_core

from ._dynamo import DynamoFrontend
from ._options import register_options
from ._trace import TraceFrontend


@ember_core.hookimpl
def ember_register(registry) -> None:
    registry.add("frontend", "dynamo", DynamoFrontend(), priority=10)
    registry.add("frontend", "trace", TraceFrontend())
    register_options(registry)
