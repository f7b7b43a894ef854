"""Run a profile as a systemd user service: `sparktui serve PROFILE` in the foreground under systemd.

  sparktui service install PROFILE [--print] [--now]   write ~/.config/systemd/user/sparktui-NAME.service
  sparktui service remove PROFILE                      disable, stop and delete it
  sparktui service status PROFILE                      the unit, systemd's view of it, lingering

The unit's stop is the supervisor's own (SIGTERM to sparktui stops vLLM's whole tree); it restarts
on failure, never after a guard trip (exit 97) or a refusal (exit 2). A user service ends at logout
unless lingering is on for the user (`loginctl enable-linger`): install checks and says so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

# what the service needs of this shell: where sparktui keeps things, where the models are, and PATH
# (a user manager's PATH is short: vLLM in a venv or ~/.local/bin would not be found). Never secrets.
# The XDG homes decide sparktui's default folders (paths.py, by platformdirs) and the Hugging Face
# cache's (HF_HOME defaults to $XDG_CACHE_HOME/huggingface): a moved one left out would have the
# service write where `sparktui status` does not look.
PASSED_ENV = (
    "PATH",
    "SPARKTUI_CONFIG_DIR",
    "SPARKTUI_STATE_DIR",
    "SPARKTUI_CACHE_DIR",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "SPARKTUI_SSH_CONFIG",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = sub.add_parser("install", help="write (and enable) a user unit that runs `sparktui serve PROFILE`")
    install.add_argument("profile", help="a profile name or a path to a .toml profile (or a recipe)")
    install.add_argument("--print", action="store_true", help="print the unit instead of writing it")
    install.add_argument("--now", action="store_true", help="also start it now")
    remove = sub.add_parser("remove", help="disable, stop and delete the profile's unit")
    remove.add_argument("profile")
    status = sub.add_parser("status", help="the unit, whether systemd runs it, and lingering")
    status.add_argument("profile")


def service_dirs() -> dict[str, str]:
    """sparktui's folders as this shell resolves them, named outright: the user manager's own
    environment (environment.d) may set the XDG homes otherwise, and the service must keep its
    state where `sparktui status` here looks for it."""
    from sparktui.paths import cache_dir, config_dir, state_dir_path

    dirs = {
        "SPARKTUI_CONFIG_DIR": config_dir(),
        "SPARKTUI_STATE_DIR": state_dir_path(),
        "SPARKTUI_CACHE_DIR": cache_dir(),
    }
    return {key: str(path.absolute()) for key, path in dirs.items()}


def unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def run(args: argparse.Namespace) -> int:
    return {"install": install, "remove": remove, "status": status}[args.action](args)


def _unit_for(profile_arg: str) -> tuple[str, Path, str]:
    """(unit name, profile path, profile name) for a profile that loads."""
    from sparktui.core.profiles import load_profile, resolve_profile
    from sparktui.core.service_unit import unit_name

    path = resolve_profile(profile_arg).resolve()
    profile = load_profile(path)  # a profile that does not load is refused here, not at boot
    return unit_name(profile.name), path, profile.name


def install(args: argparse.Namespace) -> int:
    from sparktui.atomic import atomic_write_text
    from sparktui.core.service_unit import UnitSpec, render

    name, path, profile = _unit_for(args.profile)
    env = {key: os.environ[key] for key in PASSED_ENV if os.environ.get(key)} | service_dirs()
    spec = UnitSpec(profile=profile, argv=[sys.executable, "-m", "sparktui", "serve", str(path)], environment=env)
    text = render(spec)
    if args.print:
        sys.stdout.write(text)
        return 0
    target = unit_dir() / name
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_text(target, text, private=True)
    print(f"wrote {target}")
    steps = [["daemon-reload"], ["enable", *(["--now"] if args.now else []), name]]
    for at, step in enumerate(steps):
        done = _systemctl(step)
        # a missing systemctl enabled nothing either: never say "enabled … and started it" then
        ran = f"`systemctl --user {' '.join(step)}` failed"
        why = "systemctl not found" if done is None else f"{ran}: {_last(done.stderr)}" if done.returncode else ""
        if why:
            left = " && ".join(f"systemctl --user {' '.join(s)}" for s in steps[at:])
            print(
                f"sparktui: warning: {why}; the unit is written but not "
                f"enabled{' or started' if args.now else ''}: run `{left}` once a user session is up",
                file=sys.stderr,
            )
            break
    else:
        print(
            f"enabled {name}" + (" and started it" if args.now else f"; start it with `systemctl --user start {name}`")
        )
    print(linger_advice())
    print(f"logs: journalctl --user -u {name} -f   (sparktui status shows the server; vLLM's log is in the state dir)")
    return 0


def remove(args: argparse.Namespace) -> int:
    from sparktui.core.service_unit import unit_name
    from sparktui.errors import UserError

    try:
        name = _unit_for(args.profile)[0]
    except UserError:  # the profile is gone: its unit may still be there
        name = unit_name(Path(args.profile).stem)
    target = unit_dir() / name
    if not target.exists():
        raise UserError(f"{target}: no such unit; `sparktui service install {args.profile}` writes it")
    done = _systemctl(["disable", "--now", name])  # stop first: SIGTERM to sparktui stops vLLM's tree
    if done is not None and done.returncode != 0:
        print(f"sparktui: warning: `systemctl --user disable --now {name}`: {_last(done.stderr)}", file=sys.stderr)
    target.unlink()
    _systemctl(["daemon-reload"])
    print(f"removed {target}")
    return 0


def status(args: argparse.Namespace) -> int:
    name, path, _ = _unit_for(args.profile)
    target = unit_dir() / name
    print(f"{name}: {'installed at ' + str(target) if target.exists() else 'not installed'} (profile {path})")
    for query in (["is-enabled", name], ["is-active", name]):
        done = _systemctl(query)
        answer = "systemctl not found" if done is None else (done.stdout.strip() or done.stderr.strip())
        print(f"  {query[0]}: {answer}")
    print("  " + linger_advice())
    return 0


def _last(text: str) -> str:
    return (text.strip().splitlines() or ["no message"])[-1]


def _systemctl(args: list[str]) -> subprocess.CompletedProcess[str] | None:
    exe = shutil.which("systemctl")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, "--user", *args], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([exe, *args], 1, "", "timed out after 60 s")


def linger_advice(user: str | None = None) -> str:
    """Whether this user's services outlive their logins, and how to make them."""
    import getpass

    user = user or getpass.getuser()
    exe = shutil.which("loginctl")
    enable = f"`sudo loginctl enable-linger {user}` (or `loginctl enable-linger` as {user})"
    if exe is None:
        return f"lingering: loginctl not found; without lingering a user service ends at logout: {enable}"
    try:
        done = subprocess.run(
            [exe, "show-user", user, "--property=Linger", "--value"], capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        done = subprocess.CompletedProcess([exe], 1, "", "timed out")
    value = done.stdout.strip()
    if done.returncode == 0 and value == "yes":
        return f"lingering: on for {user}: the service starts at boot and outlives your logins"
    if done.returncode == 0 and value == "no":
        return f"lingering: OFF for {user}: the service stops when you log out and waits for your login at boot; run {enable}"
    why = (done.stderr.strip().splitlines() or [value or "no answer"])[-1]
    return f"lingering: could not be checked ({why}); without it a user service ends at logout: {enable}"
