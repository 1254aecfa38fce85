"""Service units and ``memoryd install-service``: real rendering into temporary directories."""

from __future__ import annotations

import configparser
import io
import os
import plistlib
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd import units
from memoryd.units import PLACEHOLDERS, TEMPLATE_NAMES, UnitFile, install_service, render_units

REPO = Path(__file__).resolve().parent.parent
PACKAGED = REPO / "memoryd" / "units"
REPO_TEMPLATES = {
    "memoryd.socket": REPO / "systemd" / "memoryd.socket",
    "memoryd.service": REPO / "systemd" / "memoryd.service",
    "dev.memoryd.memoryd.plist": REPO / "launchd" / "dev.memoryd.memoryd.plist",
}


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd unit files are INI-like; keys may repeat (Environment=), so collect every value."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"key outside a section: {raw!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    # The same text must also be acceptable to an INI parser (no duplicate keys in our units but Environment).
    parser = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#", ";"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    assert set(parser.sections()) == set(sections)
    return sections


@pytest.fixture
def fake_exe(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "memoryd"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


@pytest.fixture
def user_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_exe: Path) -> Path:
    user_home = tmp_path / "home"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user_home / "cfg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(user_home / "state"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("MEMORYD_HOME", raising=False)
    monkeypatch.delenv("MEMORYD_SOCKET", raising=False)
    monkeypatch.setattr(units, "memoryd_command", lambda: [str(fake_exe)])
    return user_home


def render_linux(
    tmp_path: Path, exe: str | list[str], home: Path | None, socket: Path | None = None
) -> dict[str, UnitFile]:
    runtime = tmp_path / "run"
    if socket is None:
        socket = (home / "run" if home else runtime / "memoryd") / "memoryd.sock"
    units = render_units(
        platform="linux",
        exe=exe,
        home=home,
        socket=socket,
        log_file=tmp_path / "state" / "memoryd.log",
        user_home=tmp_path / "home",
        runtime_dir=runtime,
    )
    return {u.path.name: u for u in units}


def render_darwin(tmp_path: Path, exe: str | list[str], home: Path | None, socket: Path | None = None) -> UnitFile:
    user_home = tmp_path / "home"
    root = home if home else user_home / "Library" / "Application Support" / "memoryd"
    units = render_units(
        platform="darwin",
        exe=exe,
        home=home,
        socket=socket or root / "run" / "memoryd.sock",
        log_file=root / "state" / "memoryd.log",
        user_home=user_home,
    )
    assert len(units) == 1
    return units[0]


# --- templates ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_repo_templates_equal_packaged_copies(name: str) -> None:
    assert REPO_TEMPLATES[name].read_bytes() == (PACKAGED / name).read_bytes(), (
        f"{REPO_TEMPLATES[name].relative_to(REPO)} and memoryd/units/{name} differ: copy one over the other"
    )
    assert units.template_text(name) == (PACKAGED / name).read_text(encoding="utf-8")


def test_templates_carry_the_required_settings() -> None:
    socket = parse_unit(units.template_text("memoryd.socket"))["Socket"]
    assert socket["ListenStream"] == ["@MEMORYD_SOCKET@"]
    assert socket["SocketMode"] == ["0600"]
    assert socket["DirectoryMode"] == ["0700"]
    assert socket["Accept"] == ["no"]
    text = units.template_text("memoryd.service")
    assert "ExecStart=@MEMORYD_EXE@ serve --log-level info" in text
    svc = parse_unit(text.replace("@MEMORYD_ENV@\n", ""))["Service"]
    assert "ProtectHome" not in svc and "ProtectSystem" not in svc  # memoryd writes anywhere in $HOME


# --- systemd ------------------------------------------------------------------------------------------


def test_linux_default_socket_uses_runtime_specifier(tmp_path: Path, fake_exe: Path) -> None:
    units = render_linux(tmp_path, str(fake_exe), home=None)
    assert set(units) == {"memoryd.socket", "memoryd.service"}
    for unit in units.values():
        assert unit.path.parent == tmp_path / "home" / ".config" / "systemd" / "user"
        assert not [p for p in PLACEHOLDERS if p in unit.text]
        assert "@" not in unit.text.replace("memoryd.socket", "")

    sock = parse_unit(units["memoryd.socket"].text)
    assert sock["Socket"]["ListenStream"] == ["%t/memoryd/memoryd.sock"]
    assert sock["Socket"]["SocketMode"] == ["0600"]
    assert sock["Socket"]["DirectoryMode"] == ["0700"]
    assert sock["Socket"]["Accept"] == ["no"]
    assert sock["Install"]["WantedBy"] == ["sockets.target"]

    svc = parse_unit(units["memoryd.service"].text)
    assert svc["Unit"]["Requires"] == ["memoryd.socket"]
    assert svc["Unit"]["After"] == ["memoryd.socket"]
    assert svc["Service"]["Type"] == ["simple"]
    assert svc["Service"]["ExecStart"] == [f"{fake_exe} serve --log-level info"]
    assert svc["Service"]["Restart"] == ["on-failure"]
    assert svc["Service"]["NoNewPrivileges"] == ["yes"]
    assert "Environment" not in svc["Service"]


def test_linux_with_home_uses_absolute_socket_and_environment(tmp_path: Path, fake_exe: Path) -> None:
    home = tmp_path / "memoryd home"
    units = render_linux(tmp_path, str(fake_exe), home=home)
    sock = parse_unit(units["memoryd.socket"].text)
    assert sock["Socket"]["ListenStream"] == [str(home / "run" / "memoryd.sock")]
    svc = parse_unit(units["memoryd.service"].text)
    assert svc["Service"]["Environment"] == [f'"MEMORYD_HOME={home}"']


def test_linux_socket_elsewhere_is_absolute_and_passed_on(tmp_path: Path, fake_exe: Path) -> None:
    socket = tmp_path / "elsewhere" / "m.sock"
    units = render_linux(tmp_path, str(fake_exe), home=None, socket=socket)
    assert parse_unit(units["memoryd.socket"].text)["Socket"]["ListenStream"] == [str(socket)]
    env = parse_unit(units["memoryd.service"].text)["Service"]["Environment"]
    assert env == [f'"MEMORYD_SOCKET={socket}"']


def test_linux_quotes_and_escapes(tmp_path: Path) -> None:
    exe = "/opt/my tools/50%/bin/memoryd"
    home = tmp_path / "a%b"
    units = render_linux(tmp_path, [exe, "-x", "$HOME"], home=home)
    svc = parse_unit(units["memoryd.service"].text)["Service"]
    assert svc["ExecStart"] == ['"/opt/my tools/50%%/bin/memoryd" -x $$HOME serve --log-level info']
    assert svc["Environment"] == [f'"MEMORYD_HOME={str(home).replace("%", "%%")}"']
    sock = parse_unit(units["memoryd.socket"].text)["Socket"]
    assert sock["ListenStream"] == [str(home / "run" / "memoryd.sock").replace("%", "%%")]


def test_python_module_fallback_command(tmp_path: Path) -> None:
    units = render_linux(tmp_path, [sys.executable, "-m", "memoryd"], home=None)
    svc = parse_unit(units["memoryd.service"].text)["Service"]
    assert svc["ExecStart"] == [f"{sys.executable} -m memoryd serve --log-level info"]
    plist = plistlib.loads(render_darwin(tmp_path, [sys.executable, "-m", "memoryd"], home=None).text.encode())
    assert plist["ProgramArguments"] == [sys.executable, "-m", "memoryd", "serve", "--log-level", "info"]


@pytest.mark.parametrize("bad", ["relative/memoryd", ""])
def test_exe_must_be_absolute(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="absolute"):
        render_linux(tmp_path, bad, home=None)


def test_control_characters_are_refused(tmp_path: Path, fake_exe: Path) -> None:
    with pytest.raises(ValueError, match="control character"):
        render_linux(tmp_path, str(fake_exe), home=tmp_path / "a\nExecStartPre=/bin/evil")
    with pytest.raises(ValueError, match="control character"):
        render_darwin(tmp_path, str(fake_exe), home=tmp_path / "a\x01b")


def test_unknown_platform_is_refused(tmp_path: Path, fake_exe: Path) -> None:
    with pytest.raises(ValueError, match="win32"):
        render_units(
            platform="win32",
            exe=str(fake_exe),
            home=None,
            socket=tmp_path / "s",
            log_file=tmp_path / "l",
            user_home=tmp_path,
        )


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("with_home", [False, True], ids=["default", "memoryd-home"])
def test_systemd_analyze_verify(tmp_path: Path, fake_exe: Path, with_home: bool) -> None:
    units = render_linux(tmp_path, str(fake_exe), home=tmp_path / "mh" if with_home else None)
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    for unit in units.values():
        (unit_dir / unit.path.name).write_text(unit.text)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_RUNTIME_DIR": str(runtime),
        "SYSTEMD_LOG_LEVEL": "notice",
        "SYSTEMD_LOG_COLOR": "0",
    }
    proc = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--user",
            "--man=no",
            str(unit_dir / "memoryd.socket"),
            str(unit_dir / "memoryd.service"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and ("Failed to initialize manager" in output or "Failed to setup" in output):
        pytest.skip(f"systemd-analyze cannot run a user manager here: {output.strip()[:300]}")
    assert proc.returncode == 0, output
    ours = [line for line in output.splitlines() if "memoryd." in line]
    assert not ours, output


# --- launchd ------------------------------------------------------------------------------------------


def test_darwin_plist_default(tmp_path: Path, fake_exe: Path) -> None:
    unit = render_darwin(tmp_path, str(fake_exe), home=None)
    assert unit.path == tmp_path / "home" / "Library" / "LaunchAgents" / "dev.memoryd.memoryd.plist"
    assert not [p for p in PLACEHOLDERS if p in unit.text]
    plist = plistlib.loads(unit.text.encode("utf-8"))
    assert plist["Label"] == "dev.memoryd.memoryd"
    assert plist["ProgramArguments"] == [str(fake_exe), "serve", "--log-level", "info"]
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}
    log = tmp_path / "home" / "Library" / "Application Support" / "memoryd" / "state" / "memoryd.log"
    assert plist["StandardErrorPath"] == str(log)
    assert "EnvironmentVariables" not in plist


def test_darwin_plist_with_home_escapes_xml(tmp_path: Path) -> None:
    home = tmp_path / 'R&D <memory> "home"'
    exe = "/Applications/A & B/memoryd"
    unit = render_darwin(tmp_path, exe, home=home)
    plist = plistlib.loads(unit.text.encode("utf-8"))
    assert plist["ProgramArguments"][0] == exe
    assert plist["EnvironmentVariables"] == {"MEMORYD_HOME": str(home)}
    assert plist["StandardErrorPath"] == str(home / "state" / "memoryd.log")


def test_darwin_custom_socket_is_passed_on(tmp_path: Path, fake_exe: Path) -> None:
    socket = tmp_path / "s" / "m.sock"
    plist = plistlib.loads(render_darwin(tmp_path, str(fake_exe), home=None, socket=socket).text.encode())
    assert plist["EnvironmentVariables"] == {"MEMORYD_SOCKET": str(socket)}


# --- install_service ----------------------------------------------------------------------------------


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_print_only_writes_nothing(tmp_path: Path, user_env: Path, platform: str) -> None:
    before = all_files(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    assert install_service(print_only=True, home=None, out=out, err=err, platform=platform) == 0
    assert all_files(tmp_path) == before
    assert not any(p.is_dir() for p in (user_env / "cfg", user_env / "Library", user_env / "state"))
    text = out.getvalue()
    if platform == "linux":
        unit_dir = user_env / "cfg" / "systemd" / "user"
        assert f"# {unit_dir / 'memoryd.socket'}\n" in text
        assert f"# {unit_dir / 'memoryd.service'}\n" in text
        assert "ListenStream=%t/memoryd/memoryd.sock" in text
    else:
        target = user_env / "Library" / "LaunchAgents" / "dev.memoryd.memoryd.plist"
        assert text.startswith(f"# {target}\n")
        plistlib.loads(text.split("\n", 1)[1].encode())
    assert "@MEMORYD_" not in text


def test_install_linux_writes_units_and_prints_next_steps(tmp_path: Path, user_env: Path, fake_exe: Path) -> None:
    out = io.StringIO()
    assert install_service(print_only=False, home=None, out=out, err=io.StringIO(), platform="linux") == 0
    unit_dir = user_env / "cfg" / "systemd" / "user"
    assert sorted(p.name for p in unit_dir.iterdir()) == ["memoryd.service", "memoryd.socket"]
    svc = parse_unit((unit_dir / "memoryd.service").read_text())
    assert svc["Service"]["ExecStart"] == [f"{fake_exe} serve --log-level info"]
    assert stat.S_IMODE((unit_dir / "memoryd.service").stat().st_mode) == 0o644
    text = out.getvalue()
    assert "systemctl --user daemon-reload && systemctl --user enable --now memoryd.socket" in text
    assert "launchctl" not in text

    # Running it again changes nothing and makes no backup.
    out = io.StringIO()
    assert install_service(print_only=False, home=None, out=out, err=io.StringIO(), platform="linux") == 0
    assert sorted(p.name for p in unit_dir.iterdir()) == ["memoryd.service", "memoryd.socket"]
    assert "already up to date" in out.getvalue()


def test_install_with_home_keeps_backup_of_differing_file(tmp_path: Path, user_env: Path) -> None:
    unit_dir = user_env / "cfg" / "systemd" / "user"
    unit_dir.mkdir(parents=True)
    (unit_dir / "memoryd.socket").write_text("# edited by hand\n")
    home = tmp_path / "mh"
    out = io.StringIO()
    assert install_service(print_only=False, home=str(home), out=out, err=io.StringIO(), platform="linux") == 0
    assert (unit_dir / "memoryd.socket.bak").read_text() == "# edited by hand\n"
    assert not (unit_dir / "memoryd.service.bak").exists()
    sock = parse_unit((unit_dir / "memoryd.socket").read_text())
    assert sock["Socket"]["ListenStream"] == [str(home / "run" / "memoryd.sock")]
    svc = parse_unit((unit_dir / "memoryd.service").read_text())
    assert svc["Service"]["Environment"] == [f'"MEMORYD_HOME={home}"']
    assert "memoryd.socket.bak" in out.getvalue()
    assert f"MEMORYD_HOME={home} memoryctl ping" in out.getvalue()
    assert "restart memoryd.socket" in out.getvalue()

    # A second change keeps the earlier backup and adds another one.
    (unit_dir / "memoryd.socket").write_text("# edited again\n")
    assert (
        install_service(print_only=False, home=str(home), out=io.StringIO(), err=io.StringIO(), platform="linux") == 0
    )
    assert (unit_dir / "memoryd.socket.bak").read_text() == "# edited by hand\n"
    assert (unit_dir / "memoryd.socket.bak.1").read_text() == "# edited again\n"
    assert not list(unit_dir.glob(".*.tmp"))


def test_install_uses_memoryd_home_from_environment(
    tmp_path: Path, user_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "env-home"
    monkeypatch.setenv("MEMORYD_HOME", str(home))
    out = io.StringIO()
    assert install_service(print_only=True, home=None, out=out, err=io.StringIO(), platform="linux") == 0
    assert f"ListenStream={home / 'run' / 'memoryd.sock'}" in out.getvalue()
    assert f'Environment="MEMORYD_HOME={home}"' in out.getvalue()


def test_install_darwin(tmp_path: Path, user_env: Path) -> None:
    home = tmp_path / "mh"
    out = io.StringIO()
    assert install_service(print_only=False, home=str(home), out=out, err=io.StringIO(), platform="darwin") == 0
    target = user_env / "Library" / "LaunchAgents" / "dev.memoryd.memoryd.plist"
    plist = plistlib.loads(target.read_bytes())
    assert plist["EnvironmentVariables"] == {"MEMORYD_HOME": str(home)}
    assert (home / "state").is_dir()  # launchd does not create the log's directory
    assert f"launchctl bootstrap gui/$(id -u) {target}" in out.getvalue()
    assert "systemctl" not in out.getvalue()


def test_install_unsupported_platform(user_env: Path) -> None:
    err = io.StringIO()
    assert install_service(print_only=True, home=None, out=io.StringIO(), err=err, platform="win32") == 2
    assert "unsupported platform" in err.getvalue()


def test_install_reports_unwritable_target(tmp_path: Path, user_env: Path) -> None:
    (user_env / "cfg").write_text("not a directory")
    err = io.StringIO()
    assert install_service(print_only=False, home=None, out=io.StringIO(), err=err, platform="linux") == 1
    assert "cannot write" in err.getvalue()


def test_memoryd_command_is_absolute() -> None:
    command = units.memoryd_command()
    assert Path(command[0]).is_absolute()
    assert command[1:] in ([], ["-m", "memoryd"])
