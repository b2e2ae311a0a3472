"""_fabric_bench: the own TCP test over real sockets (loopback) and the parsers on captured tool outputs."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.fabric import _fabric_bench as fb

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "modules", "fixtures")


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8") as f:
        return f.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def serve_in_thread(port, peer="127.0.0.1", timeout=20):
    box = {}

    def run():
        try:
            box["result"] = fb.serve("127.0.0.1", port, peer, timeout)
        except fb.BenchError as e:
            box["error"] = str(e)

    t = threading.Thread(target=run)
    t.start()
    return t, box


def test_latency_round_trips_over_loopback():
    port = free_port()
    t, box = serve_in_thread(port)
    got = fb.latency("127.0.0.1", port, "127.0.0.1", 20, count=200, size=64)
    t.join(20)
    assert box["result"]["test"] == "latency" and box["result"]["count"] == 220  # 20 warm-up trips as well
    assert 0 < got["latency_us"] == pytest.approx(got["rtt_us_median"] / 2, rel=0.01)
    assert got["rtt_us_p99"] >= got["rtt_us_median"] and got["count"] == 200


def test_bandwidth_is_what_the_receiver_counted():
    port = free_port()
    t, box = serve_in_thread(port)
    got = fb.bandwidth("127.0.0.1", port, "127.0.0.1", 20, seconds=0.6, streams=3)
    t.join(20)
    seen = box["result"]
    assert seen["streams"] == 3 and seen["bytes"] == got["bytes"] > 0
    assert got["gbps"] == pytest.approx(got["bytes"] * 8 / got["seconds"] / 1e9, rel=0.01)
    assert got["seconds"] > 0.3   # it sent for (about) the time asked; a loaded machine only makes it longer


def test_the_client_waits_for_a_server_that_starts_late():
    port = free_port()
    box = {}

    def late():
        time.sleep(1.0)
        box["result"] = fb.serve("127.0.0.1", port, "127.0.0.1", 20)

    t = threading.Thread(target=late)
    t.start()
    got = fb.latency("127.0.0.1", port, "127.0.0.1", 20, count=10)
    t.join(20)
    assert got["count"] == 10 and box["result"]["count"] == 30


def test_nothing_listening_ends_at_the_deadline_naming_the_peer(main_sleeps):
    port = free_port()
    with pytest.raises(fb.BenchError, match=r"nothing answered on 127.0.0.1:%d before the time limit" % port):
        fb.latency("127.0.0.1", port, "127.0.0.1", 1.5)
    # the retries it chose fit in its 1.5 s: the deadline, not the number of refusals, ends it
    assert main_sleeps and sum(main_sleeps) <= 1.5


def test_the_server_hangs_up_on_any_other_address_and_times_out():
    port = free_port()
    t, box = serve_in_thread(port, peer="127.0.0.2", timeout=2)
    with pytest.raises(fb.BenchError):
        fb.latency("127.0.0.1", port, "127.0.0.1", 2, count=5)
    t.join(10)
    assert "127.0.0.2 never connected" in box["error"]


def test_the_server_refuses_an_address_that_is_not_its_own():
    with pytest.raises(fb.BenchError, match="cannot listen on 192.0.2.1"):
        fb.serve("192.0.2.1", free_port(), "127.0.0.1", 1)


def test_in_subnet():
    assert fb.in_subnet("10.99.1.12", "10.99.1.0/24")
    assert not fb.in_subnet("10.99.0.11", "10.99.1.0/24")
    assert not fb.in_subnet("not-an-ip", "10.99.1.0/24")


def test_iperf3_client_and_server_json():
    client = fb.parse_iperf3(fixture("fabric_bench", "iperf3_client.json"))
    server = fb.parse_iperf3(fixture("fabric_bench", "iperf3_server.json"))
    assert client["gbps"] > 1 and client["seconds"] == pytest.approx(2.0, abs=0.2) and client["streams"] == 1
    assert server["bytes"] == client["bytes"]


def test_iperf3_connection_refused_exits_0_but_is_an_error():
    with pytest.raises(fb.BenchError, match="unable to connect to server: Connection refused") as e:
        fb.parse_iperf3(fixture("fabric_bench", "iperf3_refused.json"))
    assert fb.iperf3_refused(e.value)
    with pytest.raises(fb.BenchError, match="printed no JSON"):
        fb.parse_iperf3("iperf3: error - some failure")


def test_ib_write_bw_on_two_sparks():
    got = fb.parse_perftest_bw(fixture("fabric_bench", "ib_write_bw_spark.txt"))
    assert got == {"gbps": 92.57, "msg_bytes": 65536, "path_mtu": 1024, "gid_index": 3, "link_type": "Ethernet",
                   "device": "rocep1s0f0"}


def test_ib_write_bw_in_mb_per_s_is_converted():
    text = fixture("fabric_bench", "ib_write_bw_spark.txt").replace("[Gb/sec]", "[MB/sec]").replace("92.57", "11035.00")
    assert fb.parse_perftest_bw(text)["gbps"] == pytest.approx(11035 * 8 * 1.048576 / 1000, rel=1e-3)


def test_ib_write_bw_without_devices_names_the_problem():
    with pytest.raises(fb.BenchError, match="Unable to find the Infiniband/RoCE device|Did not detect devices"):
        fb.parse_perftest_bw(fixture("fabric_bench", "ib_write_bw_nodev.txt"))


def test_ib_write_lat_takes_the_typical_latency():
    got = fb.parse_perftest_lat(fixture("fabric_bench", "ib_write_lat_mlx4.txt"))
    assert got["latency_us"] == 0.98 and got["avg_us"] == 1.03 and got["p99_us"] == 1.21
    assert got["path_mtu"] == 2048 and got["msg_bytes"] == 2 and got["device"] == "mlx4_0"


def test_perftest_refused():
    assert fb.perftest_refused(" Couldn't connect to 192.168.200.12:13000")
    assert not fb.perftest_refused(fixture("fabric_bench", "ib_write_bw_spark.txt"))


def test_ibv_devinfo_of_a_spark():
    got = fb.parse_ibv_devinfo(fixture("qualify_facts", "ibv_devinfo_spark.txt"))
    assert got["rocep1s0f1"] == {"port": 1, "state": "PORT_ACTIVE", "max_mtu": 4096, "active_mtu": 4096,
                                 "link_layer": "Ethernet"}
    assert got["rocep1s0f0"]["active_mtu"] == 1024 and got["rocep1s0f0"]["state"] == "PORT_DOWN"
    assert fb.parse_ibv_devinfo(fixture("qualify_facts", "ibv_devinfo_none.txt")) == {}


def test_percentile():
    assert fb.percentile([], 50) is None
    assert fb.percentile([3, 1, 2], 50) == 2
    assert fb.percentile(list(range(1, 101)), 99) == 99
