"""The plugin manager: pluggy project `ember`, entry-point group `ember`, and the registry of implementations."""

from __future__ import annotations

import difflib
import importlib.metadata
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pluggy

from .._errors import OptionError, PluginError
from ..events._dump import DumpWriter, dump_override
from ..events._events import Event
from . import hookspecs
from ._options import OptionSpec, check_options
from ._stages import PASS_POINTS, STAGES


@dataclass(frozen=True, slots=True)
class Implementation:
    """One named implementation of a stage, as a plugin registered it."""

    stage: str
    name: str
    impl: Any
    priority: int = 0
    devices: tuple[str, ...] = ()
    point: str | None = None  # graph passes: where in the pipeline they run
    default: bool = True  # graph passes: run unless options["passes"] says otherwise
    plugin: str = ""
    dist: str = ""
    version: str = ""


class PluginRegistry:
    """Named implementations per stage, with priorities. Plugins fill it in `ember_register`."""

    def __init__(self) -> None:
        self._impls: dict[tuple[str, str], Implementation] = {}
        self.options: dict[str, OptionSpec] = {}  # each declared by the plugin that reads it
        self._plugin = ("", "", "")  # (plugin, dist, version) of the plugin now registering

    def add(self, stage: str, name: str, impl: Any, *, priority: int = 0, devices: tuple[str, ...] = (),
            point: str | None = None, default: bool = True) -> None:
        if stage not in STAGES:
            raise PluginError(f"plugin {self._plugin[0]!r}: unknown stage {stage!r}; stages are {', '.join(STAGES)}")
        if stage == "pass":
            point = point or "post_capture"
            if point not in PASS_POINTS:
                raise PluginError(f"plugin {self._plugin[0]!r}: pass {name!r} at unknown point {point!r}; points are "
                                  f"{', '.join(PASS_POINTS)}")
        key = (stage, name)
        if key in self._impls:
            other = self._impls[key].plugin
            raise PluginError(f"plugin {self._plugin[0]!r}: {stage} {name!r} is already registered by {other!r}")
        plugin, dist, version = self._plugin
        self._impls[key] = Implementation(
            stage, name, impl, priority, tuple(devices), point, default, plugin, dist, version
        )

    def add_option(self, key: str, type: type | tuple[type, ...], default: Any, doc: str, *, stage: str | None = None,
                   device: str | None = None, also: tuple[str, ...] = (), choices: tuple[Any, ...] = (),
                   check: Callable[[Any], str | None] | None = None) -> None:
        """Declare option `key`. One whose value names an implementation gives its `stage` (and the `device` that
        implementation must serve, and any names accepted `also`): a name that is not installed is an error. One
        that takes a fixed few values lists them as `choices`; `check(value)` says what else is wrong with a value
        of its type (`"must be in (0, 1]"`), or None: every option is checked when `ember.compile` is called."""
        if key in self.options:
            other = self.options[key].plugin
            raise PluginError(f"plugin {self._plugin[0]!r}: option {key!r} is already defined by {other!r}")
        if stage is not None and stage not in STAGES:
            raise PluginError(f"plugin {self._plugin[0]!r}: option {key!r} names unknown stage {stage!r}; stages are "
                              f"{', '.join(STAGES)}")
        self.options[key] = OptionSpec(key, type, default, doc, self._plugin[0], stage, device, tuple(also),
                                       tuple(choices), check)

    def all(self, stage: str | None = None) -> list[Implementation]:
        impls = [i for i in self._impls.values() if stage is None or i.stage == stage]
        return sorted(impls, key=lambda i: (STAGES.index(i.stage), -i.priority, i.name))

    def find(self, stage: str, name: str | None = None, device: str | None = None) -> Implementation:
        """The implementation named `name`, else the highest-priority one (serving `device`, if given)."""
        if name is not None:
            impl = self._impls.get((stage, name))
            if impl is None:
                known = ", ".join(i.name for i in self.all(stage)) or "none installed"
                raise PluginError(f"no {stage} named {name!r} is installed; known: {known}")
            if device is not None and impl.devices and device not in impl.devices:
                serves = ", ".join(impl.devices)
                raise PluginError(f"{stage} {name!r} does not serve device {device!r} (it serves {serves})")
            return impl
        fits = [i for i in self.all(stage) if device is None or not i.devices or device in i.devices]
        if not fits:
            raise PluginError(f"no {stage} is installed" + (f" for device {device!r}" if device else ""))
        return fits[0]

    def passes(self, point: str, chosen: list[str] | tuple[str, ...] | None = None) -> list[Implementation]:
        """The graph passes that run at `point`, in order: those named in `chosen` (the `passes` option) in its
        order, else every pass registered as default, by priority then name."""
        if point not in PASS_POINTS:
            raise PluginError(f"unknown pass point {point!r}; points are {', '.join(PASS_POINTS)}")
        impls = [self.find("pass", name) for name in chosen] if chosen is not None else \
            [i for i in self.all("pass") if i.default]
        return [i for i in impls if i.point == point]

    def has(self, stage: str) -> bool:
        return any(i.stage == stage for i in self._impls.values())

    def check_options(self, options: Mapping[str, Any] | None, defaults: Mapping[str, Any] | None = None
                      ) -> dict[str, Any]:
        """Options with the plugins' defaults, then `defaults` (EMBER_OPTIONS), then `options` laid over them.
        Every given key is checked: known, of its type, and naming installed implementations where it names one."""
        if defaults:
            check_options(defaults, self.options, source="EMBER_OPTIONS")
            self._check_names(defaults, "EMBER_OPTIONS: ")
        checked = check_options({**(defaults or {}), **(options or {})}, self.options)
        self._check_names(options or {}, "")
        return checked

    def _check_names(self, options: Mapping[str, Any], where: str) -> None:
        for key, value in options.items():
            spec = self.options[key]
            if spec.stage is None or value is None:
                continue
            for name in value if isinstance(value, (list, tuple)) else [value]:
                problem = self._name_problem(spec, name)
                if problem:
                    raise OptionError(f"{where}option {key!r}: {problem}")

    def _name_problem(self, spec: OptionSpec, name: Any) -> str:
        """Why `name` cannot be the value (or an item) of option `spec`; empty when it can."""
        stage, device = spec.stage, spec.device
        if not isinstance(name, str):
            return f"must name {stage} implementations, got {type(name).__name__} {name!r}"
        if name in spec.also:
            return ""
        impl = self._impls.get((stage, name))
        if impl is None:
            valid = [i.name for i in self.all(stage)] + list(spec.also)
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"no {stage} named {name!r} is installed{hint}; valid names: {', '.join(valid) or 'none'}"
        if device is not None and impl.devices and device not in impl.devices:
            fits = [i.name for i in self.all(stage) if not i.devices or device in i.devices]
            return (f"{stage} {name!r} does not serve device {device!r} (it serves {', '.join(impl.devices)}); "
                    f"{stage}s for {device}: {', '.join(fits) or 'none installed'}")
        return ""


class PluginManager:
    """pluggy's manager plus ember's registry, built once per process from installed entry points."""

    def __init__(self, *, load_entrypoints: bool = True, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self._dists: dict[str, importlib.metadata.Distribution | None] = {}
        self.blocked = tuple(n.strip() for n in env.get("EMBER_DISABLE_PLUGINS", "").split(",") if n.strip())
        for name in self.blocked:
            self.pm.set_blocked(name)
        self._hooktrace = None
        if env.get("EMBER_TRACE_HOOKS") == "1":
            self.pm.trace.root.setwriter(lambda text: sys.stderr.write("[ember hooks] " + text))
            self.pm.enable_tracing()
            self._hooktrace = self.pm.trace.root.get("hook")
        if load_entrypoints:
            self._load_entrypoints()
        self._check_pending()
        self.registry = PluginRegistry()
        self._registered: set[str] = set()
        self.config: dict[str, Any] = {"logs": env.get("EMBER_LOGS", ""), "dump": env.get("EMBER_DUMP"),
                                       "report": env.get("EMBER_REPORT") or None,
                                       "options": _env_options(env.get("EMBER_OPTIONS", ""))}
        self.dump = DumpWriter(self.config["dump"])  # the one writer of EMBER_DUMP files, handed to observers
        self.pm.hook.ember_configure.call_historic(kwargs={"config": self.config})
        self._register_all()

    def _load_entrypoints(self) -> None:
        for ep in importlib.metadata.entry_points(group=hookspecs.PROJECT):
            if self.pm.is_blocked(ep.name) or self.pm.get_plugin(ep.name) is not None:
                continue
            try:
                plugin = ep.load()
            except Exception as e:
                source = f"entry point {ep.value!r} of {_dist_name(ep)}"
                raise PluginError(f"plugin {ep.name!r} ({source}) failed to import: {type(e).__name__}: {e}") from e
            self._dists[ep.name] = ep.dist
            self._pluggy_register(plugin, ep.name)

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        """Register a plugin object by hand (tests, notebooks): same hooks as an entry point, no back door."""
        name = self._pluggy_register(plugin, name)
        if name is not None:
            self._check_pending()
            self._register_all()
        return name

    def _pluggy_register(self, plugin: Any, name: str | None) -> str | None:
        try:
            return self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as e:
            shown = name or self.pm.get_canonical_name(plugin)
            raise PluginError(f"plugin {shown!r} does not fit ember's hooks: {e}; hooks are {_HOOK_NAMES}") from e

    def _check_pending(self) -> None:
        """A hook implementation no hookspec matches (a misspelled hook) fails here, naming plugin and hook."""
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            raise PluginError(f"{e}; ember's hooks are {_HOOK_NAMES}") from e

    def _call(self, hook: str, impl: Any, shown: dict[str, Any], **kwargs: Any) -> Any:
        """Call one plugin's implementation (one at a time, to name a culprit); traced like pluggy's own calls."""
        trace = self._hooktrace
        if trace is None:
            return impl.function(**kwargs)
        trace.root.indent += 1
        trace(hook, f"plugin={impl.plugin_name}", shown)
        try:
            return impl.function(**kwargs)
        finally:
            trace.root.indent -= 1

    def _register_all(self) -> None:
        for impl in self.pm.hook.ember_register.get_hookimpls():
            if impl.plugin_name in self._registered:
                continue
            self._registered.add(impl.plugin_name)
            dist = self._dists.get(impl.plugin_name)
            self.registry._plugin = (impl.plugin_name, *_dist_row(dist))
            try:
                self._call("ember_register", impl, {}, registry=self.registry)
            except PluginError:
                raise
            except Exception as e:
                what = f"{type(e).__name__}: {e}"
                raise PluginError(f"plugin {impl.plugin_name!r} raised in hook ember_register: {what}") from e
            finally:
                self.registry._plugin = ("", "", "")

    @property
    def observed(self) -> bool:
        return bool(self.pm.hook.ember_event.get_hookimpls())

    def emit(self, event: Event) -> None:
        """Send an event to every observer (with the dump writer if it asks for `dump`); an observer that raises is
        named in a `PluginError`."""
        given = {"event": event, "dump": dump_override() or self.dump}
        for impl in reversed(self.pm.hook.ember_event.get_hookimpls()):
            kwargs = {name: given[name] for name in impl.argnames}
            try:
                self._call("ember_event", impl, {"event": f"{event.kind} ({event.stage}) {event.message}"}, **kwargs)
            except Exception as e:
                raise PluginError(f"plugin {impl.plugin_name!r} raised in hook ember_event ({event.kind}): "
                                  f"{type(e).__name__}: {e}") from e

    def plugins(self) -> list[tuple[str, str, str]]:
        """(plugin name, distribution, version) of every registered plugin."""
        rows = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked by EMBER_DISABLE_PLUGINS
                continue
            rows.append((name, *_dist_row(self._dists.get(name))))
        return sorted(rows)


def _dist_row(dist: importlib.metadata.Distribution | None) -> tuple[str, str]:
    """(distribution name, version) of a plugin's distribution; empty for plugins registered by hand."""
    return (dist.metadata["name"], dist.version) if dist else ("", "")


_HOOK_NAMES = ", ".join(n for n in dir(hookspecs) if n.startswith("ember_"))


def _env_options(text: str) -> dict[str, Any]:
    """EMBER_OPTIONS: a JSON object of options every compile starts from (run a program with another stage
    without editing it, e.g. EMBER_OPTIONS='{"partition": "default"}')."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise OptionError(f"EMBER_OPTIONS is not valid JSON ({e.msg} at column {e.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise OptionError(f"EMBER_OPTIONS must be a JSON object of options, got {text!r}")
    return value


def _dist_name(ep: importlib.metadata.EntryPoint) -> str:
    return f"{ep.dist.metadata['name']} {ep.dist.version}" if ep.dist else "an unknown distribution"


_manager: PluginManager | None = None
_lock = threading.Lock()


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, built on first use."""
    global _manager
    if _manager is None:
        with _lock:
            if _manager is None:
                _manager = PluginManager()
    return _manager


def reset_plugin_manager() -> None:
    """Forget the process-wide manager (tests, or after installing a plugin at run time)."""
    global _manager
    _manager = None


def emit(event: Event) -> None:
    get_plugin_manager().emit(event)
