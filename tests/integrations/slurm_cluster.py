"""A real one-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's packages.

Everything lives in one temporary folder (munge key and socket, slurm.conf, gres.conf, state,
spool, logs) and listens on free loopback ports, so it neither needs nor touches /etc/slurm or
a system munged. The daemons run in the foreground as child processes and are stopped by
:meth:`SlurmCluster.stop`.

The node has one GPU in gres.conf with ``File=/dev/null``: this machine has no GPU, and the
device file is the hardware boundary (Slurm only binds it into the job's cgroup, which
``task/none`` skips). Everything Slurm does with the GRES is real: slurmctld runs the
job_submit/lua plugin, validates and schedules the job's ``tres_per_node`` against the node's
``gpu:1,shard:8`` (or ``gpu:1,mps:100`` with ``sharing="mps"``: Slurm allows one of the two per
node), and slurmd exports ``CUDA_VISIBLE_DEVICES`` and ``SLURM_SHARDS_ON_NODE`` (or
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``) to the job. ``MessageTimeout=60``: the plugin runs ``gpucast slurm`` inside the submit call, which
takes seconds (see docs/deploying.md).

Needs root (slurmd launches jobs) and the packages slurmctld, slurmd, slurm-client, munge and
slurm-wlm-basic-plugins (job_submit_lua.so); :func:`missing` says what is absent.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin"])
NODE = "gpucast-node"
SHARDS_PER_GPU = 8
MPS_PER_GPU = 100


def which(name: str) -> str | None:
    return shutil.which(name, path=SEARCH_PATH)


def plugin_dir() -> Path | None:
    """The folder with job_submit_lua.so (Debian's multiarch path), or None."""
    for base in ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm",
                 "/usr/lib/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm"):
        if (Path(base) / "job_submit_lua.so").exists():
            return Path(base)
    return None


def missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    if os.name != "posix" or os.geteuid() != 0:
        return "slurmd must run as root to launch jobs"
    absent = [b for b in BINARIES if which(b) is None]
    if plugin_dir() is None:
        absent.append("job_submit_lua.so")
    if absent:
        return ("Slurm is not installed (" + ", ".join(absent) + " missing; apt-get install slurmctld slurmd "
                "slurm-client munge slurm-wlm-basic-plugins, as .ci/run does)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """munged + slurmctld + slurmd in ``root``; :meth:`run` calls Slurm's client commands."""

    def __init__(self, root: Path, plugin_text: str, env: dict[str, str] | None = None, sharing: str = "shard"):
        self.root = root
        self.sharing = f"shard:{SHARDS_PER_GPU}" if sharing == "shard" else f"mps:{MPS_PER_GPU}"
        self.conf = root / "etc" / "slurm.conf"
        self.plugin = root / "etc" / "job_submit.lua"
        self.munge_socket = root / "munge" / "munge.sock"
        self.env = {**os.environ, **(env or {}), "SLURM_CONF": str(self.conf), "PATH": SEARCH_PATH}
        self.procs: list[subprocess.Popen] = []
        for d in ("etc", "munge", "state", "spool", "log", "jobs"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "munge").chmod(0o700)
        self.plugin.write_text(plugin_text)

    # ------------------------------------------------------------------ start and stop
    def start(self, timeout_s: float = 60.0) -> "SlurmCluster":
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        m = self.root / "munge"
        self._spawn([which("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                     f"--key-file={key}", f"--log-file={m / 'munged.log'}", f"--pid-file={m / 'munged.pid'}",
                     f"--seed-file={m / 'munged.seed'}"], "munged")
        self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged did not create its socket")
        self.conf.write_text(self._slurm_conf())
        (self.conf.parent / "gres.conf").write_text(
            f"NodeName={NODE} Name=gpu Count=1 File=/dev/null\n"
            f"NodeName={NODE} Name={self.sharing.replace(':', ' Count=')}\n")
        self._spawn([which("slurmctld"), "-D", "-c"], "slurmctld")
        self._spawn([which("slurmd"), "-D", "-c", "-N", NODE], "slurmd")
        self._wait(lambda: self.node_state() == "idle", timeout_s,
                   "the node did not become idle", log="slurmd")
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()

    def _spawn(self, argv: list, name: str) -> None:
        out = open(self.root / "log" / f"{name}.stdout", "wb")
        self.procs.append(subprocess.Popen([str(a) for a in argv], env=self.env, stdout=out,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True))
        out.close()

    def _wait(self, ready, timeout_s: float, what: str, log: str = "slurmctld") -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead[0]} exited; last lines of its log:\n{self.log_tail(log)}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{what} within {timeout_s:.0f} s; last lines of {log}'s log:\n{self.log_tail(log)}")

    def _slurm_conf(self) -> str:
        r = self.root
        return "\n".join([
            "ClusterName=gpucasttest",
            f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "MessageTimeout=60",
            "MailProg=/bin/true",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            f"GresTypes=gpu,{self.sharing.split(':')[0]}",
            "JobSubmitPlugins=lua",
            f"PluginDir={plugin_dir()}",
            f"NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 CPUs=4 "
            f"RealMemory=1000 Gres=gpu:1,{self.sharing} State=UNKNOWN",
            f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
            "",
        ])

    # ------------------------------------------------------------------ using it
    def run(self, *argv, env: dict | None = None, cwd: Path | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess:
        """A Slurm client command; returns the finished process (check returncode yourself)."""
        return subprocess.run([str(a) for a in argv], env={**self.env, **(env or {})}, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def set_plugin(self, plugin_text: str) -> None:
        """Replace job_submit.lua and have slurmctld load it again (``scontrol reconfigure``)."""
        self.plugin.write_text(plugin_text)
        p = self.run("scontrol", "reconfigure", timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"scontrol reconfigure: {p.stderr.strip()}")
        end = time.monotonic() + 30
        while time.monotonic() < end and not any("plugin loaded" in line for line in self.plugin_log()[-3:]):
            time.sleep(0.2)

    def node_state(self) -> str:
        p = self.run("sinfo", "-h", "-N", "-o", "%T", timeout=30)
        return p.stdout.strip().rstrip("*~#$@+") if p.returncode == 0 else ""

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job -o`` as a dict of its Key=Value fields."""
        p = self.run("scontrol", "show", "job", "-o", str(job_id), timeout=30)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.strip() or p.stdout.strip())
        fields = {}
        for token in p.stdout.split():
            if "=" in token:
                k, v = token.split("=", 1)
                fields.setdefault(k, v)
        return fields

    def job_ids(self) -> list[int]:
        p = self.run("squeue", "-h", "-o", "%i", timeout=30)
        return sorted(int(x) for x in p.stdout.split())

    def wait_state(self, job_id: int, states: set[str], timeout_s: float = 120) -> dict[str, str]:
        end = time.monotonic() + timeout_s
        while True:
            j = self.job(job_id)
            if j.get("JobState") in states or time.monotonic() > end:
                return j
            time.sleep(0.3)

    def log_tail(self, name: str = "slurmctld", lines: int = 30) -> str:
        for path in (self.root / "log" / f"{name}.log", self.root / "log" / f"{name}.stdout"):
            if path.exists() and path.stat().st_size:
                return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def plugin_log(self) -> list[str]:
        """The lines the job_submit plugin logged (slurm.log_info -> 'lua: ...')."""
        path = self.root / "log" / "slurmctld.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return [line.split("lua: ", 1)[1] for line in text.splitlines() if "lua: " in line]
