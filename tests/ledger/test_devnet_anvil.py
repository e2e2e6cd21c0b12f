"""Where accord finds anvil, how `accord devnet install` puts it there, and that a failed
start leaves no anvil running."""

from __future__ import annotations

import json
import os
import platform
import signal
import stat
import threading
import time
from pathlib import Path

import pytest

import accord.ledger.chain
import accord.ledger.wiring
from accord.ledger.devnet import (
    ANVIL_PACKAGE,
    ANVIL_VARIABLE,
    ANVIL_VERSION,
    anvil_cache_dir,
    anvil_command,
    checkout_node_modules,
    find_anvil,
    find_free_port,
    install_anvil,
    platform_package_name,
    port_of_command,
)
from accord.ledger.errors import DeploymentError, DevnetError
from accord.ledger.settings import Settings
from accord.ledger.wiring import connect_chain, devnet_for, start_devnet
from tests.accord_cli import run_accord

REPO_ROOT = Path(__file__).resolve().parents[2]


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _npm_anvil(node_modules: Path) -> Path:
    """Where an npm install leaves the native anvil on this platform."""
    package = platform_package_name(platform.system(), platform.machine())
    assert package is not None, "tests run on a platform anvil is built for"
    return node_modules / package / "bin" / "anvil"


# -- finding it --------------------------------------------------------------------------------


def test_the_pinned_version_is_package_json_s() -> None:
    manifest = json.loads((REPO_ROOT / "package.json").read_text())
    assert manifest["dependencies"][ANVIL_PACKAGE] == ANVIL_VERSION


def test_the_cache_is_under_xdg_cache_home_else_home(tmp_path: Path) -> None:
    assert anvil_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "accord" / "anvil"
    home_cache = Path.home() / ".cache" / "accord" / "anvil"
    assert anvil_cache_dir({}) == home_cache
    # The XDG spec: a relative path is invalid and ignored.
    assert anvil_cache_dir({"XDG_CACHE_HOME": "relative/cache"}) == home_cache


def test_a_checkout_has_node_modules_an_installed_package_does_not(tmp_path: Path) -> None:
    assert checkout_node_modules(REPO_ROOT) == REPO_ROOT / "node_modules"
    assert checkout_node_modules(tmp_path) is None  # site-packages holds no package.json


def test_each_place_is_used_in_order(tmp_path: Path) -> None:
    checkout, cache, bin_dir = tmp_path / "checkout", tmp_path / "cache", tmp_path / "bin"
    env = {"PATH": str(bin_dir)}

    def find() -> Path:
        return find_anvil(env, node_modules=checkout, cache_dir=cache)

    in_cache = _executable(_npm_anvil(cache / "node_modules"))
    assert find() == in_cache
    launcher = _executable(checkout / ".bin" / "anvil")
    assert find() == launcher
    native = _executable(_npm_anvil(checkout))
    assert find() == native
    on_path = _executable(bin_dir / "anvil")
    assert find() == on_path
    chosen = _executable(tmp_path / "elsewhere" / "my-anvil")
    assert find_anvil({**env, ANVIL_VARIABLE: str(chosen)}, checkout, cache) == chosen


def test_a_file_that_does_not_run_is_passed_over(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    not_runnable = _npm_anvil(cache / "node_modules")
    not_runnable.parent.mkdir(parents=True)
    not_runnable.write_text("")
    with pytest.raises(DevnetError, match="anvil not found"):
        find_anvil({"PATH": ""}, node_modules=tmp_path / "none", cache_dir=cache)


def test_none_anywhere_names_the_three_places_and_the_command(tmp_path: Path) -> None:
    checkout, cache = tmp_path / "checkout", tmp_path / "cache"
    with pytest.raises(DevnetError) as raised:
        find_anvil({"PATH": str(tmp_path / "bin")}, node_modules=checkout, cache_dir=cache)
    message = str(raised.value)
    assert "PATH" in message
    assert str(checkout) in message
    assert str(cache) in message
    assert "`accord devnet install`" in message
    assert ANVIL_VARIABLE in message


def test_a_bad_accord_anvil_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-anvil"
    with pytest.raises(DevnetError, match=f"{ANVIL_VARIABLE}={missing} is not a runnable"):
        find_anvil({ANVIL_VARIABLE: str(missing)}, tmp_path, tmp_path)


# -- installing it -----------------------------------------------------------------------------

FAKE_NPM = """#!/bin/sh
# Records its arguments, then does what `npm install --prefix DIR pkg` would for anvil.
printf '%s\\n' "$@" > "$(dirname "$0")/argv"
prefix="$3"
mkdir -p "$prefix/node_modules/{package}/bin"
printf '#!/bin/sh\\necho anvil\\n' > "$prefix/node_modules/{package}/bin/anvil"
chmod +x "$prefix/node_modules/{package}/bin/anvil"
"""


def test_install_puts_the_pinned_anvil_in_the_cache(tmp_path: Path) -> None:
    package = platform_package_name(platform.system(), platform.machine())
    npm = _executable(tmp_path / "npm" / "npm", FAKE_NPM.replace("{package}", str(package)))
    cache = tmp_path / "cache"
    anvil = install_anvil(cache, npm=str(npm))
    assert anvil == _npm_anvil(cache / "node_modules")
    argv = (tmp_path / "npm" / "argv").read_text().split()
    assert argv[:3] == ["install", "--prefix", str(cache)]
    assert argv[-1] == f"{ANVIL_PACKAGE}@{ANVIL_VERSION}"
    assert json.loads((cache / "package.json").read_text())["private"] is True
    # and `devnet up` finds it there
    assert find_anvil({"PATH": ""}, node_modules=tmp_path / "none", cache_dir=cache) == anvil


def test_a_failing_npm_is_reported_with_its_output(tmp_path: Path) -> None:
    npm = _executable(tmp_path / "npm", "#!/bin/sh\necho 'E404 no such package' >&2\nexit 1\n")
    with pytest.raises(DevnetError, match=r"(?s)failed.*E404 no such package"):
        install_anvil(tmp_path / "cache", npm=str(npm))


def test_an_install_that_leaves_no_anvil_is_an_error(tmp_path: Path) -> None:
    npm = _executable(tmp_path / "npm")
    with pytest.raises(DevnetError, match="left no runnable anvil"):
        install_anvil(tmp_path / "cache", npm=str(npm))


def test_no_npm_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DevnetError, match="npm not found"):
        install_anvil(tmp_path / "cache")


# -- a failed start stops what it started ------------------------------------------------------


def _settings(home: Path) -> Settings:
    return Settings.from_env(
        {"ACCORD_HOME": str(home), "ACCORD_DEVNET_PORT": str(find_free_port())}
    )


def _refuse(*_: object, **__: object) -> None:
    raise DeploymentError("the registry cannot be deployed (test)")


@pytest.mark.devnet
def test_a_failed_devnet_up_leaves_no_anvil_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path / "home")
    accord.ledger.wiring.prepare_home(settings)
    monkeypatch.setattr(accord.ledger.chain, "ensure_registry", _refuse)  # connect_chain imports it
    devnet = devnet_for(settings)
    try:
        with pytest.raises(DeploymentError, match="cannot be deployed"):
            start_devnet(settings)
        assert not devnet.status().running
        assert not devnet.pid_file.exists()
        assert not settings.devnet_record_file.exists()
    finally:
        devnet.down()  # when the test fails, it leaves nothing running either


@pytest.mark.devnet
def test_a_failed_connect_stops_the_devnet_it_started_but_not_a_running_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path / "home")
    accord.ledger.wiring.prepare_home(settings)
    devnet = devnet_for(settings)
    monkeypatch.setattr(accord.ledger.chain, "ensure_registry", _refuse)
    try:
        with pytest.raises(DeploymentError):
            connect_chain(settings)
        assert not devnet.status().running
    finally:
        devnet.down()
    info = devnet.up()  # running before the call: a failure leaves it running
    try:
        with pytest.raises(DeploymentError):
            connect_chain(settings)
        status = devnet.status()
        assert status.running and status.pid == info.pid
    finally:
        devnet.down()


def test_the_port_of_an_anvil_command_line_is_read_from_it(tmp_path: Path) -> None:
    argv = anvil_command(tmp_path / "anvil", 21234, tmp_path / "state.json")
    assert port_of_command(argv) == 21234
    assert port_of_command(["anvil", "--host", "127.0.0.1"]) is None
    assert port_of_command(["anvil", "--port"]) is None


def test_accord_devnet_install_puts_anvil_in_the_user_cache(tmp_path: Path) -> None:
    package = platform_package_name(platform.system(), platform.machine())
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "npm", FAKE_NPM.replace("{package}", str(package)))
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "ACCORD_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(REPO_ROOT),
    }
    # each command a process of its own, forked from the tests' CLI zygote (tests/accord_cli.py)
    done = run_accord(env, "devnet", "install", "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    installed = json.loads(done.stdout)
    cache = tmp_path / "cache" / "accord" / "anvil"
    assert installed == {"anvil": str(_npm_anvil(cache / "node_modules")), "version": ANVIL_VERSION}
    assert (bin_dir / "argv").read_text().split()[:3] == ["install", "--prefix", str(cache)]

    failing = {**env, "PATH": str(tmp_path / "nothing")}
    refused = run_accord(failing, "devnet", "install", timeout=60)
    assert refused.returncode == 1
    assert "npm not found" in refused.stderr and "Traceback" not in refused.stderr


def test_an_installed_accord_names_the_places_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("accord.ledger.devnet.CHECKOUT_ROOT", tmp_path / "site-packages")
    with pytest.raises(DevnetError) as raised:
        find_anvil({"PATH": ""}, cache_dir=tmp_path / "cache")
    message = str(raised.value)
    assert "not on PATH" in message
    assert "accord does not run from a checkout" in message
    assert str(tmp_path / "cache") in message and "`accord devnet install`" in message
    assert "npm ci" not in message


@pytest.mark.devnet
def test_a_running_devnet_that_answers_late_is_reused_and_one_that_never_answers_is_named(
    tmp_path: Path,
) -> None:
    """A devnet busy on a loaded machine may miss one short probe: `up` asks it again until
    its timeout before calling it unanswering. The busy devnet is a real anvil held stopped
    (SIGSTOP) and let go (SIGCONT) a second and a half later, past the probe's 1 s."""
    settings = _settings(tmp_path / "home")
    accord.ledger.wiring.prepare_home(settings)
    devnet = devnet_for(settings)
    info = devnet.up()
    try:
        _stop(info.pid)
        waking = threading.Timer(1.5, os.kill, (info.pid, signal.SIGCONT))
        waking.start()
        try:
            again = devnet.up()
        finally:
            waking.join()
        assert again.reused and again.pid == info.pid and again.chain_id == info.chain_id
        _stop(info.pid)
        try:
            with pytest.raises(DevnetError, match="does not answer"):
                devnet.up(timeout_s=1.5)
        finally:
            os.kill(info.pid, signal.SIGCONT)
    finally:
        devnet.down()


def _stop(pid: int) -> None:
    """SIGSTOP `pid` and return once the kernel shows it stopped (state T)."""
    os.kill(pid, signal.SIGSTOP)
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.01)
