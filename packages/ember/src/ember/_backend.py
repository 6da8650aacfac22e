"""What torch loads when a program asks for the backend "ember" (`torch.compile(model, backend="ember")`, through
the `torch_dynamo_backends` entry point): `ember_runtime.dynamo_backend`, and before Dynamo traces the program's
first frame, the dynamo frontend's fixes to torch._dynamo (`ember_capture.prepare_dynamo`: guards on class
constants where Dynamo forgets them). A frontend compiled through `ember.compile` installs them itself."""

from ember_capture import prepare_dynamo
from ember_runtime import dynamo_backend

prepare_dynamo()

__all__ = ["dynamo_backend"]
