"""Errors: one base class, and schema errors that lead with the path of the bad field."""

from ember_core import EmberError, GraphError, OptionError, PluginError, SchemaError


def test_every_error_is_an_ember_error():
    assert all(issubclass(e, EmberError) for e in (GraphError, OptionError, PluginError, SchemaError))


def test_schema_error_leads_with_where():
    err = SchemaError("nodes[1].args[0]", "expected str")
    assert str(err) == "nodes[1].args[0]: expected str"
    assert (err.where, err.what) == ("nodes[1].args[0]", "expected str")


def test_schema_error_without_where_is_just_the_message():
    assert str(SchemaError("", "cannot encode")) == "cannot encode"
