# SPDX-License-Identifier: BSD-2-Clause
"""What the benchmarks beside PyTorch share (perf/vs-torch, perf/hogwild):
messages, running a command for its JSON line, the lock that keeps other
benchmarks off the cores, finding Debian's PyTorch, and a cgroup that
holds one process to a share of a CPU (a straggler made for real).  Plain Python 3,
no third-party modules."""

import argparse
import fcntl
import json
import os
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INSTALL = "apt-get update && apt-get install -y python3-torch python3-numpy"
PROG = os.path.basename(sys.argv[0])


def fail(what, hint=None, status=1):
    print(f"{PROG}: error: {what}", file=sys.stderr)
    if hint:
        print(f"{PROG}: hint: {hint}", file=sys.stderr)
    sys.exit(status)


def log(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def thread_list(text):
    """A comma-separated list of thread counts >= 1 (an argparse type)."""
    try:
        ts = [int(t) for t in text.split(",")]
    except ValueError:
        ts = []
    if not ts or min(ts) < 1:
        raise argparse.ArgumentTypeError(
            f"'{text}': a comma-separated list of thread counts >= 1, e.g. 1,2")
    return ts


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_json(cmd, what, timeout, env=None, hint="use fewer --examples"):
    """Run @cmd, return the JSON object on the last line of its stdout,
    with "child_cpu_seconds": the CPU time the command used in all."""
    cpu = children_cpu()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        fail(f"{what} ran past {timeout} s: {' '.join(cmd)}", hint)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        fail(f"{what} exited with {r.returncode}: {' '.join(cmd)}")
    try:
        got = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        fail(f"{what} printed no JSON: {' '.join(cmd)}", r.stderr.strip())
    got["child_cpu_seconds"] = round(children_cpu() - cpu, 3)
    return got


class BenchLock:
    """flock(1)'s lock, so that no other benchmark shares the cores."""

    def __init__(self, path):
        self.path, self.fd = path, None

    def __enter__(self):
        if self.path:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def torch_versions(python):
    """The torch module's version and the Debian package's, or a failure
    that says how to install it."""
    r = subprocess.run([python, "-c", "import torch, numpy; "
                        "print(torch.__version__)"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        fail(f"PyTorch is not importable by {python}: "
             f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}",
             f"install Debian's: {INSTALL} (its modules are for "
             "/usr/bin/python3; or: make perf-deps)", 3)
    deb = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "python3-torch"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout.strip()
    return r.stdout.strip(), deb or "not a Debian package"


def check_binary(path):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        fail(f"--bin '{path}': no such executable",
             "build it: make -j2 command (or make O=DIR and --bin "
             "DIR/bin/shadowsync)", 2)


class CpuLimit:
    """A cgroup holding at most @pct % of one CPU, for one process."""

    def __init__(self, pct):
        self.pct, self.path, self.procs = pct, None, None

    def __enter__(self):
        name = f"ss-straggler-{os.getpid()}"
        period = 100000
        quota = max(1000, int(period * self.pct / 100))
        v2 = "/sys/fs/cgroup/cgroup.controllers"
        try:
            if os.path.exists(v2):
                with open(v2) as f:
                    if "cpu" not in f.read().split():
                        raise OSError("cgroup v2 has no cpu controller")
                with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
                    f.write("+cpu")
                self.path = f"/sys/fs/cgroup/{name}"
                os.mkdir(self.path)
                with open(f"{self.path}/cpu.max", "w") as f:
                    f.write(f"{quota} {period}")
            else:
                self.path = f"/sys/fs/cgroup/cpu/{name}"
                os.mkdir(self.path)
                with open(f"{self.path}/cpu.cfs_period_us", "w") as f:
                    f.write(str(period))
                with open(f"{self.path}/cpu.cfs_quota_us", "w") as f:
                    f.write(str(quota))
        except OSError as e:
            self.__exit__()
            fail(f"cannot make a cgroup limited to {self.pct} % of a CPU: {e}",
                 "run as root on a machine whose cgroups have the cpu "
                 "controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us)")
        self.procs = f"{self.path}/cgroup.procs"
        return self

    def enter(self):
        """In the child, before exec: move this process into the cgroup."""
        self.add(os.getpid())

    def add(self, pid, procs=None):
        """Move process @pid and every descendant of it into the cgroup
        (a process started at full speed, held once it trains), or into
        the cgroup whose cgroup.procs is @procs."""
        pids, i = [pid], 0
        while i < len(pids):
            try:
                with open(f"/proc/{pids[i]}/task/{pids[i]}/children") as f:
                    pids += [int(c) for c in f.read().split()]
            except OSError:
                pass
            i += 1
        for p in pids:
            try:
                with open(procs or self.procs, "w") as f:
                    f.write(str(p))
            except OSError:
                pass  # it ended meanwhile

    def release(self, pid):
        """Move @pid and its descendants back to the parent cgroup."""
        self.add(pid, os.path.join(os.path.dirname(self.path),
                                   "cgroup.procs"))

    def __exit__(self, *exc):
        if self.path and os.path.isdir(self.path):
            try:
                os.rmdir(self.path)
            except OSError:
                pass


# MLPerf's DLRM-DCNv2 (TorchRec's DLRM_DCN: embeddings of 128, bottom
# 13-512-256-128, 3 cross layers of rank 512 on 27 x 128, top
# 1024-1024-512-256-1, Adagrad, the Criteo 1TB multi-hot bag sizes) scaled
# to a core of this machine: widths a quarter (32; rank 128 of 864),
# MLPs halved and shortened, tables capped at 40000 rows; the bags and the
# Criteo cardinalities (capped) as MLPerf's.  Each: the model's options
# (as train, gemm-peak and torch_ctr.py take them), gen-data's options for
# its data, and the optimizer its benchmarks default to.
MODELS = {
    "dlrm": ([], [], "sgd"),
    "dlrmv2": (["--emb-dim", "32", "--bottom", "13-256-64-32", "--top",
                "512-256-1", "--interaction", "dcn", "--cross-layers", "3",
                "--cross-rank", "128", "--hash-size", "40000"],
               ["--multi-hot", "mlperf", "--shape", "criteo", "--cap",
                "40000"], "adagrad"),
}
