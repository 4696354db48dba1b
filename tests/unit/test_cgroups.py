"""The cgroup sampler on fake cgroup trees (v1 as on this machine, and v2)."""

from __future__ import annotations

from pathlib import Path

from pybox._adapters.cgroups import CgroupSampler, locate

CID = "c" * 64


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v1_tree(root: Path) -> None:
    memory = root / "memory" / "docker" / CID
    write(memory / "memory.usage_in_bytes", "1000\n")
    write(memory / "memory.max_usage_in_bytes", "5000\n")
    write(memory / "memory.limit_in_bytes", "67108864\n")
    write(memory / "memory.failcnt", "0\n")
    write(memory / "memory.memsw.failcnt", "3\n")
    write(memory / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    pids = root / "pids" / "docker" / CID
    write(pids / "pids.current", "4\n")
    write(pids / "pids.max", "32\n")
    write(pids / "pids.events", "max 7\n")
    write(root / "cpuacct" / "docker" / CID / "cpuacct.usage", "1500000000\n")
    cpu = root / "cpu" / "docker" / CID
    write(cpu / "cpu.stat", "nr_periods 20\nnr_throttled 5\nthrottled_time 250000000\n")
    write(cpu / "cpu.cfs_quota_us", "50000\n")
    write(cpu / "cpu.cfs_period_us", "100000\n")


def test_v1_counters(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    location = locate(CID, root=str(tmp_path))
    assert location is not None and location.version == 1
    sampler = CgroupSampler(location, 0.01)
    assert sampler.sample()
    (tmp_path / "pids" / "docker" / CID / "pids.current").write_text("9\n")
    assert sampler.sample()
    (tmp_path / "pids" / "docker" / CID / "pids.current").write_text("2\n")
    assert sampler.sample()
    observed, unknown = sampler.observation()
    sampler.close()
    assert observed.cgroup_version == 1
    assert observed.samples == 3
    assert observed.memory_peak_bytes == 5000
    assert observed.memory_peak_source == "kernel peak counter"
    assert observed.memory_limit_bytes == 64 * 1024 * 1024
    assert observed.memory_limit_hits == 3
    assert observed.oom_kill_count == 1
    assert observed.pids_limit == 32
    assert observed.pids_peak == 9  # v1 has no peak file: the highest sample
    assert observed.pids_peak_source == "highest sample"
    assert observed.pids_limit_hits == 7
    assert observed.cpu_usage_s == 1.5
    assert observed.cpu_quota_cpus == 0.5
    assert (observed.cpu_periods, observed.cpu_throttled_periods) == (20, 5)
    assert observed.cpu_throttled_s == 0.25
    assert unknown == []


def test_v1_pids_peak_is_the_kernels_when_it_keeps_one(tmp_path: Path) -> None:
    """Linux 6.1+ keeps pids.peak on v1 too; a sample of pids.current can read one
    over the cap (a refused fork is counted for an instant), the peak never."""
    v1_tree(tmp_path)
    pids = tmp_path / "pids" / "docker" / CID
    write(pids / "pids.peak", "32\n")
    location = locate(CID, root=str(tmp_path))
    assert location is not None
    sampler = CgroupSampler(location, 0.01)
    (pids / "pids.current").write_text("33\n")
    assert sampler.sample()
    observed, _ = sampler.observation()
    sampler.close()
    assert observed.pids_peak == 32
    assert observed.pids_peak_source == "kernel peak counter"


def test_v2_counters(tmp_path: Path) -> None:
    write(tmp_path / "cgroup.controllers", "cpu memory pids\n")
    base = tmp_path / "system.slice" / f"docker-{CID}.scope"
    write(base / "memory.current", "2000\n")
    write(base / "memory.max", "max\n")
    write(base / "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    write(base / "pids.current", "3\n")
    write(base / "pids.max", "128\n")
    write(base / "pids.events", "max 0\n")
    write(
        base / "cpu.stat", "usage_usec 250000\nnr_periods 3\nnr_throttled 1\nthrottled_usec 1000\n"
    )
    write(base / "cpu.max", "100000 100000\n")
    location = locate(CID, root=str(tmp_path))
    assert location is not None and location.version == 2
    sampler = CgroupSampler(location, 0.01)
    assert sampler.sample()
    observed, unknown = sampler.observation()
    sampler.close()
    assert observed.cgroup_version == 2
    assert observed.memory_limit_bytes is None  # "max": no limit
    assert observed.memory_peak_bytes == 2000
    assert observed.memory_peak_source == "highest sample"  # no memory.peak on this kernel
    assert any(u.fact == "exact memory peak" for u in unknown)
    assert observed.oom_kill_count == 1
    assert observed.memory_limit_hits == 4
    assert observed.pids_peak == 3
    assert observed.cpu_usage_s == 0.25
    assert observed.cpu_quota_cpus == 1.0
    assert observed.cpu_throttled_s == 0.001


def test_a_vanished_cgroup_keeps_the_last_sample(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    location = locate(CID, root=str(tmp_path))
    assert location is not None
    location = type(location)(1, {k: str(tmp_path / "gone" / k) for k in location.files})
    sampler = CgroupSampler(location, 0.01)
    assert not sampler.sample()
    observed, _ = sampler.observation()
    assert observed.samples == 0
    assert observed.memory_peak_bytes is None


def test_no_cgroup_found(tmp_path: Path) -> None:
    assert locate(CID, root=str(tmp_path)) is None
