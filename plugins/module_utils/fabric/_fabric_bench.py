# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric measurements between two nodes (private to sparkfleet.vllm): the collection's own TCP test and the parsers of
the tools it prefers when a node has them (iperf3's JSON, perftest's ib_write_bw / ib_write_lat, ibv_devinfo).

The own test is one bounded exchange between two module runs, one per node, started at the same time by one task:
the server listens on its fabric IP only, accepts connections from the expected peer only, serves one test and exits;
the client connects (retrying until the server listens, within the same deadline), runs it and reports. Nothing runs
after the deadline. Bandwidth is what the receiver counted (as iperf3 reports it), over ``streams`` connections.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import socket
import threading
import time

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

HEADER_LIMIT = 4096
CHUNK = 1 << 20


class BenchError(Exception):
    """A measurement that could not be taken; the message says why in words a person acts on."""


def in_subnet(ip, subnet):
    """Whether IPv4 address ``ip`` lies in ``subnet`` (CIDR)."""
    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_network(subnet, strict=False)
    except ValueError:
        return False


def _remaining(deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        raise BenchError("the time limit ran out")
    return left


def _recv_exact(conn, size, deadline):
    data = bytearray()
    while len(data) < size:
        conn.settimeout(_remaining(deadline))
        got = conn.recv(size - len(data))
        if not got:
            raise BenchError("the peer closed the connection mid-test")
        data.extend(got)
    return bytes(data)


def _recv_line(conn, deadline):
    data = bytearray()
    while not data.endswith(b"\n"):
        if len(data) > HEADER_LIMIT:
            raise BenchError("the peer sent no test header (not a sparkfleet fabric test)")
        conn.settimeout(_remaining(deadline))
        got = conn.recv(1)
        if not got:
            raise BenchError("the peer closed the connection before its header")
        data.extend(got)
    try:
        return _json.loads(data.decode("utf-8", "replace"), "the peer's header")
    except ValueError:
        raise BenchError("the peer sent no test header (not a sparkfleet fabric test)")


def _send_json(conn, obj, deadline):
    conn.settimeout(_remaining(deadline))
    conn.sendall((json.dumps(obj) + "\n").encode("utf-8"))


def percentile(values, pct):
    """The pct-th percentile (nearest rank) of values; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(int(math.ceil(pct / 100.0 * len(ordered))) - 1, 0)
    return ordered[min(rank, len(ordered) - 1)]


class _Listener(object):
    """A listening socket on ``bind`` that hands over connections from ``peer`` only."""

    def __init__(self, bind, port, peer, backlog=16):
        self.peer = peer
        self.rejected = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((bind, port))
        except OSError as e:
            self.sock.close()
            raise BenchError("cannot listen on %s:%d: %s (another process holds the port, or the address is not this "
                             "node's)" % (bind, port, e.strerror or e))
        self.sock.listen(backlog)

    def accept(self, deadline):
        while True:
            try:
                self.sock.settimeout(_remaining(deadline))
                conn, addr = self.sock.accept()
            except socket.timeout:
                raise BenchError("the peer %s never connected before the time limit" % self.peer)
            if addr[0] == self.peer:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return conn
            self.rejected.append(addr[0])
            conn.close()

    def close(self):
        self.sock.close()


def serve(bind, port, peer, timeout):
    """Serve one test to ``peer`` (latency or bandwidth, as the client's header asks); returns what was seen."""
    try:
        return _serve(bind, port, peer, timeout)
    except (OSError, socket.timeout) as e:
        raise BenchError("the connection from %s broke: %s" % (peer, e.strerror or e))


def _serve(bind, port, peer, timeout):
    deadline = time.monotonic() + timeout
    listener = _Listener(bind, port, peer)
    try:
        control = listener.accept(deadline)
        try:
            header = _recv_line(control, deadline)
            test = header.get("test")
            if test == "latency":
                size, count = int(header["size"]), int(header["count"])
                for _i in range(count):
                    msg = _recv_exact(control, size, deadline)
                    control.settimeout(_remaining(deadline))
                    control.sendall(msg)
                return {"test": test, "count": count, "size": size, "rejected": listener.rejected}
            if test == "bandwidth":
                streams = int(header["streams"])
                counts = []
                threads = []
                for _i in range(streams):
                    conn = listener.accept(deadline)
                    slot = {"bytes": 0, "first": None, "last": None, "error": None}
                    counts.append(slot)
                    thread = threading.Thread(target=_drain, args=(conn, slot, deadline))
                    thread.daemon = True
                    thread.start()
                    threads.append(thread)
                for thread in threads:
                    thread.join(max(deadline - time.monotonic(), 0))
                errors = [c["error"] for c in counts if c["error"]]
                if errors or any(t.is_alive() for t in threads):
                    raise BenchError("a data stream did not finish: %s" % (errors[0] if errors else "time limit"))
                starts = [c["first"] for c in counts if c["first"] is not None]
                ends = [c["last"] for c in counts if c["last"] is not None]
                total = sum(c["bytes"] for c in counts)
                seconds = (max(ends) - min(starts)) if starts and ends else 0.0
                _send_json(control, {"bytes": total, "seconds": seconds, "streams": streams}, deadline)
                return {"test": test, "bytes": total, "seconds": seconds, "streams": streams,
                        "rejected": listener.rejected}
            raise BenchError("the peer asked for an unknown test %r" % (test,))
        finally:
            control.close()
    finally:
        listener.close()


def _drain(conn, slot, deadline):
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    try:
        while True:
            conn.settimeout(max(deadline - time.monotonic(), 0.001))
            n = conn.recv_into(view)
            now = time.monotonic()
            if not n:
                break
            if slot["first"] is None:
                slot["first"] = now
            slot["last"] = now
            slot["bytes"] += n
    except (OSError, socket.timeout) as e:
        slot["error"] = str(e) or e.__class__.__name__
    finally:
        conn.close()


def connect(peer, port, bind, deadline):
    """A connection from ``bind`` to ``peer``:``port``, retried while nothing listens yet (the server's module may start
    a moment later than this one)."""
    last = None
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((bind, 0))
            sock.settimeout(min(_remaining(deadline), 5.0))
            sock.connect((peer, port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except (ConnectionRefusedError, socket.timeout) as e:
            sock.close()
            last = e
        except OSError as e:
            sock.close()
            raise BenchError("cannot connect from %s to %s:%d: %s" % (bind, peer, port, e.strerror or e))
        if deadline - time.monotonic() < 0.3:
            raise BenchError("nothing answered on %s:%d before the time limit (%s): the peer's test did not start, or "
                             "a firewall drops the port" % (peer, port, last))
        time.sleep(0.25)


def latency(peer, port, bind, timeout, count=1000, size=64, warmup=20):
    """Round trips of ``size``-byte messages over one TCP connection: median and p99 round trip, one-way estimate."""
    try:
        return _latency(peer, port, bind, timeout, count, size, warmup)
    except (OSError, socket.timeout) as e:
        raise BenchError("the connection to %s:%d broke: %s (the peer's test ended, or it was not ours)"
                         % (peer, port, e.strerror or e))


def _latency(peer, port, bind, timeout, count, size, warmup):
    deadline = time.monotonic() + timeout
    sock = connect(peer, port, bind, deadline)
    try:
        _send_json(sock, {"test": "latency", "count": count + warmup, "size": size}, deadline)
        msg = b"q" * size
        rtts = []
        for i in range(count + warmup):
            t0 = time.perf_counter()
            sock.settimeout(_remaining(deadline))
            sock.sendall(msg)
            _recv_exact(sock, size, deadline)
            if i >= warmup:
                rtts.append((time.perf_counter() - t0) * 1e6)
    finally:
        sock.close()
    median = percentile(rtts, 50)
    return {"count": count, "size": size, "rtt_us_median": round(median, 2), "rtt_us_p99": round(percentile(rtts, 99), 2),
            "latency_us": round(median / 2.0, 2)}


def bandwidth(peer, port, bind, timeout, seconds=5.0, streams=1):
    """Bytes sent for ``seconds`` over ``streams`` connections, as the receiver counted them: Gbit/s."""
    try:
        return _bandwidth(peer, port, bind, timeout, seconds, streams)
    except (OSError, socket.timeout) as e:
        raise BenchError("the connection to %s:%d broke: %s (the peer's test ended, or it was not ours)"
                         % (peer, port, e.strerror or e))


def _bandwidth(peer, port, bind, timeout, seconds, streams):
    deadline = time.monotonic() + timeout
    control = connect(peer, port, bind, deadline)
    try:
        _send_json(control, {"test": "bandwidth", "streams": streams}, deadline)
        errors = []
        socks = [connect(peer, port, bind, deadline) for _i in range(streams)]
        stop_at = time.monotonic() + seconds
        if stop_at > deadline - 2:
            raise BenchError("the time limit is shorter than the test (%.0f s): raise the timeout" % seconds)

        def pump(sock):
            payload = memoryview(b"\0" * CHUNK)
            try:
                while time.monotonic() < stop_at:
                    sock.settimeout(_remaining(deadline))
                    sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
            except (OSError, BenchError) as e:
                errors.append(str(e) or e.__class__.__name__)
            finally:
                sock.close()

        threads = [threading.Thread(target=pump, args=(s,)) for s in socks]
        for thread in threads:
            thread.daemon = True
            thread.start()
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0))
        if errors:
            raise BenchError("a data stream failed: %s" % errors[0])
        got = _recv_line(control, deadline)
    finally:
        control.close()
    if not got.get("seconds"):
        raise BenchError("the receiver counted no time (nothing arrived)")
    gbps = got["bytes"] * 8 / got["seconds"] / 1e9
    return {"bytes": got["bytes"], "seconds": round(got["seconds"], 3), "streams": streams, "gbps": round(gbps, 3)}


# ---------------------------------------------------------------------------------------------------- iperf3
def parse_iperf3(text):
    """iperf3 -J output -> {gbps, bytes, seconds, retransmits, streams}. iperf3 exits 0 with {"error": ...} when it
    could not connect: that raises BenchError with iperf3's words."""
    try:
        data = _json.loads(text, "iperf3's output")
    except ValueError:
        raise BenchError("iperf3 printed no JSON: %s" % (text or "").strip()[-300:])
    if not isinstance(data, dict):
        raise BenchError("iperf3 printed JSON that is not its report: %s" % (text or "").strip()[-300:])
    if data.get("error"):
        raise BenchError("iperf3: %s" % data["error"])
    end = _mapping(data.get("end"))
    got = _mapping(end.get("sum_received"))
    sent = _mapping(end.get("sum_sent"))
    start = _mapping(data.get("start"))
    rate = got.get("bits_per_second")
    if not rate or isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < 1e15:
        raise BenchError("iperf3 reported no received bandwidth")
    seconds = got.get("seconds")
    seconds = seconds if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds < 1e9 else 0.0
    connected = start.get("connected")
    return {"gbps": round(rate / 1e9, 3), "bytes": got.get("bytes"), "seconds": round(seconds, 3),
            "retransmits": sent.get("retransmits"),
            "streams": len(connected) if isinstance(connected, list) and connected else None}


def _mapping(value):
    return value if isinstance(value, dict) else {}


def iperf3_refused(error):
    """Whether an iperf3 client error means the server is not listening yet (worth another try)."""
    return "Connection refused" in str(error) or "unable to connect" in str(error)


# ---------------------------------------------------------------------------------------------------- perftest
_PERF_INFO_RE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z .#_-]*?)\s*:\s*(?P<value>\S.*?)\s*$")
_PERF_COL_RE = re.compile(r"#bytes|#iterations|(?:BW )?[\w%.]+(?: percentile)?\[[^\]]+\]")


def _perf_info(text):
    """The 'Key : value' settings perftest prints in its banner (two per line on some lines)."""
    info = {}
    for line in text.splitlines():
        if "address" in line or line.strip().startswith(("#", "-")):
            continue
        for part in re.split(r"\s{2,}(?=[A-Z][A-Za-z .#_-]*:)", line.strip()):
            m = _PERF_INFO_RE.match(part)
            if m:
                info[m.group("key").strip()] = m.group("value").strip()
    return info


def _perf_table(text, marker):
    """The column names of the result header holding ``marker`` and its numeric rows."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if marker in line:
            cols = _PERF_COL_RE.findall(line)
            rows = []
            for row in lines[i + 1:]:
                cells = row.split()
                if not cells or not re.match(r"^\d+$", cells[0]):
                    if row.strip().startswith("-") and rows:
                        break
                    continue
                try:
                    rows.append(dict(zip(cols, [float(c) for c in cells])))
                except ValueError:
                    continue
            return cols, rows
    return None, []


def _perf_error(text):
    """perftest's own words about what went wrong (up to three lines), else its last line."""
    keys = ("couldn't", "unable", "failed", "error", "did not detect", "no ib devices", "check if")
    said = [ln.strip() for ln in (text or "").splitlines() if any(k in ln.lower() for k in keys)]
    if said:
        return "; ".join(said[:3])
    return (text or "").strip().splitlines()[-1] if (text or "").strip() else "no output"


def parse_perftest_bw(text):
    """ib_write_bw output -> {gbps, msg_bytes, path_mtu, gid_index, link_type, device}; the last result row counts
    (a --run_infinitely run prints one per interval)."""
    cols, rows = _perf_table(text, "BW average[")
    if not rows:
        raise BenchError("ib_write_bw gave no result: %s" % _perf_error(text))
    row = rows[-1]
    key = next(c for c in cols if c.startswith("BW average["))
    value = row[key]
    gbps = value if "Gb/sec" in key else value * 8 * 1.048576 / 1000.0  # MB/sec is MiB/s in perftest
    return dict(_perf_common(text), gbps=round(gbps, 3), msg_bytes=int(row["#bytes"]))


def parse_perftest_lat(text):
    """ib_write_lat output -> {latency_us (t_typical, else t_avg), avg_us, p99_us, msg_bytes, path_mtu, ...}."""
    cols, rows = _perf_table(text, "t_avg[usec]")
    if not rows:
        raise BenchError("ib_write_lat gave no result: %s" % _perf_error(text))
    row = rows[0]
    typical = row.get("t_typical[usec]")
    return dict(_perf_common(text), latency_us=typical if typical is not None else row["t_avg[usec]"],
                avg_us=row["t_avg[usec]"], p99_us=row.get("99% percentile[usec]"), msg_bytes=int(row["#bytes"]))


def _perf_common(text):
    info = _perf_info(text)
    mtu = re.match(r"(\d+)", info.get("Mtu", ""))
    gid = info.get("GID index")
    return {"path_mtu": int(mtu.group(1)) if mtu else None, "gid_index": int(gid) if gid and gid.isdigit() else None,
            "link_type": info.get("Link type"), "device": info.get("Device")}


def perftest_refused(text):
    """Whether a perftest client failed because the server is not listening yet (worth another try)."""
    return "Couldn't connect to" in (text or "") or "Unable to open file descriptor for socket connection" in (text or "")


# ---------------------------------------------------------------------------------------------------- ibv_devinfo
def parse_ibv_devinfo(text):
    """ibv_devinfo -> {device: {port, state, active_mtu, max_mtu, link_layer}} (first port of each device)."""
    devices = {}
    current = None
    for line in (text or "").splitlines():
        m = re.match(r"^hca_id:\s*(\S+)", line)
        if m:
            current = devices.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        m = re.match(r"^\s+(port|state|active_mtu|max_mtu|link_layer):\s*(.+?)\s*$", line)
        if not m or (m.group(1) in current and m.group(1) != "port"):
            continue
        key, value = m.group(1), m.group(2)
        if key == "port":
            if "port" in current:
                current = {}  # a second port: keep the first port's facts
            current["port"] = int(value)
        elif key in ("active_mtu", "max_mtu"):
            num = re.match(r"(\d+)", value)
            current[key] = int(num.group(1)) if num else None
        elif key == "state":
            current[key] = value.split()[0]
        else:
            current[key] = value
    return devices
