"""One frozen Settings object, its groups typed in ``memoryd/settings.py``. Precedence: command-line flag > env
``MEMORYD_<NAME>`` > ``memoryd.yaml`` > default; each setting keeps its flat name in all three.

``docs/reference/settings.md`` is generated from the groups; a test fails when they differ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import memorydirs
from pydantic import ValidationError

from memoryd.settings import (
    GROUPS,
    ContextSettings,
    Group,
    LifecycleSettings,
    NotesSettings,
    RulesSettings,
    SearchSettings,
    SemanticSettings,
    ServerSettings,
    flat_name,
    flat_names,
)


@dataclass(frozen=True, slots=True)
class Dirs:
    """The daemon's directories as ``Path`` objects: a typed view of ``memorydirs.Dirs``, the one place that
    chooses them (MEMORYD_HOME, XDG, macOS) and names the files in them; the client and the daemon never disagree."""

    where: memorydirs.Dirs

    @classmethod
    def resolve(cls, home: str | None = None) -> Dirs:
        return cls(memorydirs.resolve_dirs(home))

    @property
    def home(self) -> Path | None:
        return None if self.where.home is None else Path(self.where.home)

    @property
    def config(self) -> Path:
        return Path(self.where.config)

    @property
    def state(self) -> Path:
        return Path(self.where.state)

    @property
    def run(self) -> Path:
        return Path(self.where.run)

    @property
    def owner_token(self) -> Path:
        return Path(self.where.owner_token)

    @property
    def settings_file(self) -> Path:
        return Path(self.where.settings_file)

    @property
    def registry(self) -> Path:
        return Path(self.where.registry)

    @property
    def pid_file(self) -> Path:
        return Path(self.where.pid_file)

    @property
    def lock_file(self) -> Path:
        return Path(self.where.lock_file)

    @property
    def log_file(self) -> Path:
        return Path(self.where.log_file)

    @property
    def workspaces_state(self) -> Path:
        return self.state / "workspaces"


@dataclass(frozen=True, slots=True)
class Settings:
    """The daemon's settings, one frozen group per part that reads them (``memoryd/settings.py``), and where things
    are. The composition root passes each group whole; nothing below it imports this module."""

    server: ServerSettings = field(default_factory=ServerSettings)
    notes: NotesSettings = field(default_factory=NotesSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    semantic: SemanticSettings = field(default_factory=SemanticSettings)
    rules: RulesSettings = field(default_factory=RulesSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    # Not settings proper: where things are. Filled by load_settings.
    dirs: Dirs = field(default_factory=Dirs.resolve)
    socket: Path = field(default_factory=lambda: Path(memorydirs.socket_path()))


class SettingsError(ValueError):
    pass


_WHAT = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}


def _kind(group: type[Group], name: str) -> Any:
    """The Python type a setting's raw value (YAML scalar, environment text, flag) is read as."""
    annotation = group.model_fields[name].annotation
    return annotation if annotation in (int, float, bool) else str


def _coerce(group: type[Group], name: str, raw: Any, origin: str) -> Any:
    kind = _kind(group, name)
    flat = flat_name(group, name)
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise ValueError(text)
        if isinstance(raw, (dict, list)):
            raise TypeError(type(raw).__name__)
        return kind(raw)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{origin}: {flat} must be {_WHAT[kind]}, got {raw!r}") from exc


def _problem(error: Any) -> str:
    """A pydantic error about one setting, in the words the settings page uses."""
    ctx = error.get("ctx") or {}
    if error["type"] == "greater_than" and ctx.get("gt") == 0:
        return "must be positive"
    if error["type"] == "greater_than_equal":
        return "must be positive or 0" if ctx.get("ge") == 0 else f"must be at least {ctx.get('ge')}"
    if error["type"] == "less_than_equal":
        return f"must be in (0, {ctx.get('le')}]"
    if error["type"] == "literal_error":
        return "must be " + str(ctx.get("expected", "")).replace("'", "")
    return str(error["msg"])


G = TypeVar("G", bound=Group)


def _group(model: type[G], values: dict[str, tuple[Any, Any, str]]) -> G:
    """The group ``model`` built from the values given for it (flat name → (value, raw value, where it came
    from)); a value out of its bounds stops with the setting's flat name and its origin."""
    mine = {flat_name(model, f): f for f in model.model_fields}
    given = {mine[flat]: (raw, origin) for flat, (_, raw, origin) in values.items() if flat in mine}
    try:
        return model.model_validate({mine[flat]: value for flat, (value, _, _) in values.items() if flat in mine})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field_ = str(first["loc"][0])
        raw, origin = given[field_]
        raise SettingsError(f"{origin}: {flat_name(model, field_)} {_problem(first)}, got {raw!r}") from exc


def _file_values(path: Path) -> dict[str, tuple[Any, str]]:
    """The settings in ``memoryd.yaml``: flat (``search_fusion: rrf``) or nested by group (``search: {fusion:
    rrf}``), both accepted; flat name → (raw value, origin)."""
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(loaded, dict):
        raise SettingsError(f"{path}: expected a mapping of setting: value")
    names = flat_names()
    found: dict[str, tuple[Any, str]] = {}
    for key, raw in loaded.items():
        if key in GROUPS and isinstance(raw, dict):
            model = GROUPS[key]
            for inner, value in raw.items():
                if inner not in model.model_fields:
                    raise SettingsError(f"{path}: unknown setting {key}.{inner!r}")
                found[flat_name(model, inner)] = (value, str(path))
        elif key in names:
            found[key] = (raw, str(path))
        else:
            raise SettingsError(f"{path}: unknown setting {key!r}")
    return found


def load_settings(
    *, home: str | None = None, socket: str | None = None, overrides: dict[str, Any] | None = None
) -> Settings:
    """``overrides``: command-line flags by flat name (None: not given)."""
    dirs = Dirs.resolve(home)
    names = flat_names()
    raw: dict[str, tuple[Any, str]] = {}
    if dirs.settings_file.exists():
        raw.update(_file_values(dirs.settings_file))
    for flat in names:
        env = os.environ.get(f"MEMORYD_{flat.upper()}")
        if env is not None and env != "":
            raw[flat] = (env, f"MEMORYD_{flat.upper()}")
    for flat, value in (overrides or {}).items():
        if value is not None:
            raw[flat] = (value, f"--{flat.replace('_', '-')}")
    values: dict[str, tuple[Any, Any, str]] = {}
    for flat, (value, origin) in raw.items():
        group, field_ = names[flat]
        values[flat] = (_coerce(GROUPS[group], field_, value, origin), value, origin)
    return Settings(
        server=_group(ServerSettings, values),
        notes=_group(NotesSettings, values),
        search=_group(SearchSettings, values),
        semantic=_group(SemanticSettings, values),
        rules=_group(RulesSettings, values),
        context=_group(ContextSettings, values),
        lifecycle=_group(LifecycleSettings, values),
        dirs=dirs,
        socket=Path(memorydirs.socket_path(socket, home)),
    )
