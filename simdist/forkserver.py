"""A fork server for rank processes: one Python process that has imported torch and simdist once, and forks a
fresh child for every simulated rank, so a rank process starts in milliseconds instead of the seconds an
interpreter takes to import torch. A forked child is a process of its own (own memory, own module globals,
own interpreter state): what it imports after the fork (the program, Megatron-Core) is its alone, exactly as
in a process torchrun starts.

Why not multiprocessing's "forkserver" context: its children inherit the server's standard streams (a rank's
prints would go wherever the caller's stdout pointed when the server started, not where it points now, which
breaks pytest's capture and shell redirection), and each child re-imports the caller's `__main__` (a script
without an `if __name__ == "__main__"` guard would run again in every rank). Here the caller hands its current
stdout and stderr to each child with the request (SCM_RIGHTS), and a child runs only simdist's rank entry.

The server is single-threaded (forking a threaded process is unsafe) and leaves with its caller: when the
caller's end of the socket closes, it kills the children still running and exits.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading

_MAX_MSG = 1 << 20


class ForkServer:
    """The caller's handle on its server (one per caller process, started at first use)."""

    _instances = {}
    _lock = threading.Lock()

    def __init__(self, preload):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = parent
        self.exits = {}  # pid -> wait status, as the server reported
        # one BLAS thread: numpy's OpenBLAS would otherwise start a worker thread at import, and a process
        # that forks must have only one (simdist runs kernels on one intra-op thread anyway)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-c", "from simdist.forkserver import serve; serve()",
                                      str(child.fileno()), *preload], pass_fds=[child.fileno()],
                                     stdin=subprocess.DEVNULL, close_fds=True, env=env)
        child.close()
        self.pid = os.getpid()
        self.lock = threading.Lock()
        reply = self._receive(timeout=600)
        if reply != ("ready",):
            raise RuntimeError(f"simdist's fork server did not start: {reply!r}")

    @classmethod
    def get(cls, preload=()):
        """This process's server that has imported `preload` ("module" or "module:function", a function being
        called once, e.g. to warm lazy imports), started at first use."""
        key = tuple(preload)
        with cls._lock:
            s = cls._instances.get(key)
            if s is None or s.pid != os.getpid() or s.proc.poll() is not None:
                s = cls._instances[key] = cls(key)
            return s

    def start(self, entry, env, cwd):
        """Fork a child that calls `entry` ("module:function"; its return value is the exit status) with `env`
        as its environment and `cwd` as its directory; returns its pid."""
        with self.lock:
            data = pickle.dumps(("fork", entry, dict(env), cwd))
            fds = [sys.stdout.fileno(), sys.stderr.fileno()] if _has_fds() else []
            socket.send_fds(self.sock, [data], fds)
            while True:
                msg = self._receive(timeout=60)
                if msg[0] == "forked":
                    # a pid is reused once the system wraps around (pid_max is 32768 here): the exit of an
                    # earlier child with this pid, already reported, is not this child's
                    self.exits.pop(msg[1], None)
                    return msg[1]
                self._note(msg)

    def poll(self, pid):
        """The child's exit code (negative: the signal that ended it), or None while it runs."""
        with self.lock:
            while True:
                msg = self._receive(timeout=0)
                if msg is None:
                    break
                self._note(msg)
        status = self.exits.get(pid)
        if status is None:
            return None
        return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    def kill(self, pid):
        """Kill the child `pid` (the server does it, and only while that pid is still one of its children: a
        pid of a child that has exited may belong to another process by now)."""
        with self.lock:
            if pid not in self.exits:
                self.sock.send(pickle.dumps(("kill", pid)))

    def _note(self, msg):
        if msg[0] == "exit":
            self.exits[msg[1]] = msg[2]
        elif msg[0] == "dead":
            raise RuntimeError("simdist's fork server exited")

    def _receive(self, timeout):
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return None
        data = self.sock.recv(_MAX_MSG)
        if not data:
            return ("dead",)
        return pickle.loads(data)


def _has_fds():
    try:
        sys.stdout.fileno()
        sys.stderr.fileno()
        return True
    except (AttributeError, OSError, ValueError):  # replaced by an object without a file (pytest's capsys)
        return False


# --- the server -----------------------------------------------------------------------------------------------
def _call(name):
    import importlib
    module, _, function = name.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, function)() if function else None


def serve():
    sock = socket.socket(fileno=int(sys.argv[1]))
    for name in sys.argv[2:]:
        _call(name)
    tasks = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ()
    if len(tasks) > 1:
        sock.send(pickle.dumps(("threads", len(tasks))))  # forking a threaded process would not be safe
        os._exit(1)
    sock.send(pickle.dumps(("ready",)))
    children = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.02 if children else None)
        gone = False
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                try:
                    sock.send(pickle.dumps(("exit", pid, status)))
                except OSError:  # the launcher has gone (its run is over): as at end of file below
                    gone = True
        if not ready and not gone:
            continue
        data, fds = b"", []
        if not gone:
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MSG, 4)
            except OSError:
                pass
        if not data:
            for pid in children:
                _kill_group(pid)
            os._exit(0)
        request = pickle.loads(data)
        if request[0] == "kill":
            if request[1] in children:
                _kill_group(request[1])
            continue
        _, entry, env, cwd = request
        pid = os.fork()
        if pid == 0:
            _child(sock, fds, entry, env, cwd)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.send(pickle.dumps(("forked", pid)))


def _descendants(pid):
    """Every live process below `pid` (from /proc: each process's parent), deepest last."""
    parents = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            parents.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def _kill_group(pid):
    """Kill a rank and every process it started (a multiprocessing Manager's server, a spawned helper): a rank
    killed alone left those running, re-parented to init and holding the run's stdout, so a pipe after `simdist
    run` never closed (torchrun's agent ends its workers' processes alike). The rank stays in the launcher's
    process group, so whoever kills that group still kills the ranks."""
    for p in [pid] + _descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _child(sock, fds, entry, env, cwd):
    status = 1
    try:
        sock.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        if fds:
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        status = _call(entry)
    except BaseException:  # noqa: BLE001 - the child must never return into the server's loop
        import traceback
        traceback.print_exc()
    finally:
        try:
            # the rank ends as an interpreter does (torchrun's rank processes are interpreters of their own): its
            # exit handlers run, multiprocessing's among them (util._exit_function shuts down the Managers and
            # joins the children the program left, e.g. Megatron's dist_checkpointing results queue); os._exit
            # alone left those processes running after the run
            import atexit
            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001 - atexit prints a handler's error itself, as at interpreter exit
            pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status or 0)
