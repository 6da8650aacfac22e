"""Test helpers for plugin authors: the codegen conformance kit and a pytest plugin."""
