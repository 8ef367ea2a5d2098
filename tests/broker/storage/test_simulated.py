"""The simulated disk's crash and fault semantics (broker/storage/simulated.py)."""

import errno
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.storage import SimulatedFileSystem, read_file, write_atomically


def _disk() -> tuple[SimulatedFileSystem, str]:
    fs = SimulatedFileSystem()
    fs.makedirs("/node/data")
    return fs, "/node/data"


def _write(fs, path, data, *, sync_file=False, sync_dir=False):
    f = fs.open(path)
    f.pwrite(data, f.size())
    if sync_file:
        f.fsync()
    f.close()
    if sync_dir:
        fs.fsync_dir(path.rsplit("/", 1)[0])


def test_a_crash_keeps_fsynced_bytes_and_drops_the_rest():
    fs, d = _disk()
    _write(fs, f"{d}/a", b"durable", sync_file=True, sync_dir=True)
    _write(fs, f"{d}/a", b"+volatile")
    assert read_file(f"{d}/a", fs=fs) == b"durable+volatile"
    fs.crash()
    assert read_file(f"{d}/a", fs=fs) == b"durable"


def test_a_truncation_is_volatile_until_fsynced():
    fs, d = _disk()
    _write(fs, f"{d}/a", b"0123456789", sync_file=True, sync_dir=True)
    f = fs.open(f"{d}/a")
    f.truncate(4)
    fs.crash()
    assert read_file(f"{d}/a", fs=fs) == b"0123456789"


def test_a_new_name_is_durable_only_once_its_directory_is_fsynced():
    fs, d = _disk()
    _write(fs, f"{d}/a", b"x", sync_file=True)
    fs.crash()
    assert fs.listdir(d) == []
    with pytest.raises(FileNotFoundError):
        fs.open(f"{d}/a", create=False)
    _write(fs, f"{d}/a", b"x", sync_file=True, sync_dir=True)
    fs.crash()
    assert fs.listdir(d) == ["a"] and read_file(f"{d}/a", fs=fs) == b"x"


def test_a_rename_not_yet_durable_leaves_the_old_name_after_a_crash():
    fs, d = _disk()
    _write(fs, f"{d}/old", b"bytes", sync_file=True, sync_dir=True)
    fs.rename(f"{d}/old", f"{d}/new")
    assert fs.listdir(d) == ["new"]
    fs.crash()
    assert fs.listdir(d) == ["old"] and read_file(f"{d}/old", fs=fs) == b"bytes"


def test_write_atomically_leaves_the_old_or_the_new_file_never_half():
    fs, d = _disk()
    write_atomically(f"{d}/cp", "old\n", fs=fs)
    write_atomically(f"{d}/cp", "new\n", fs=fs, sync_dir=False)  # renamed, not yet durable
    fs.crash()
    assert read_file(f"{d}/cp", fs=fs) == b"old\n"
    write_atomically(f"{d}/cp", "new\n", fs=fs)
    fs.crash()
    assert read_file(f"{d}/cp", fs=fs) == b"new\n"
    assert fs.listdir(d) == ["cp"]


def test_handles_opened_before_a_crash_are_dead():
    fs, d = _disk()
    f = fs.open(f"{d}/a")
    fs.crash()
    with pytest.raises(OSError) as raised:
        f.pwrite(b"late", 0)
    assert raised.value.errno == errno.EBADF


@settings(max_examples=200, deadline=None)
@given(writes=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=12),
       synced=st.integers(min_value=0, max_value=12), seed=st.integers(0, 2**32 - 1))
def test_a_crash_with_writeback_keeps_a_prefix_of_what_was_written(writes, synced, seed):
    """Appends, fsynced after the first `synced`: whatever a crash with writeback leaves is
    at least the fsynced bytes and a prefix of everything written (possibly torn inside a
    write), never anything else."""
    fs, d = _disk()
    f = fs.open(f"{d}/log")
    fs.fsync_dir(d)
    for i, data in enumerate(writes):
        f.append(data)
        if i + 1 == synced:
            f.fsync()
    durable = b"".join(writes[:synced]) if synced <= len(writes) else b""
    everything = b"".join(writes)
    fs.crash(random.Random(seed))
    survived = read_file(f"{d}/log", fs=fs)
    assert survived.startswith(durable) and everything.startswith(survived)


def test_crashes_are_deterministic_for_a_seed():
    def run(seed):
        fs, d = _disk()
        f = fs.open(f"{d}/log")
        fs.fsync_dir(d)
        for i in range(20):
            f.append(bytes([i]) * 50)
        fs.crash(random.Random(seed))
        return read_file(f"{d}/log", fs=fs)

    assert run(7) == run(7)
    assert len({run(seed) for seed in range(20)}) > 1  # the seed does decide something


def test_faults_hit_only_the_paths_under_their_prefix_until_healed():
    fs, d = _disk()
    fs.makedirs(f"{d}/t-0")
    fs.makedirs(f"{d}/t-1")
    sick = fs.open(f"{d}/t-0/a")
    well = fs.open(f"{d}/t-1/a")
    fault = fs.fail("fsync", f"{d}/t-0")
    with pytest.raises(OSError) as raised:
        sick.fsync()
    assert raised.value.errno == errno.EIO and fault.hits == 1
    well.fsync()
    fs.fail("read", f"{d}/t-1", errno.EIO, times=1)
    with pytest.raises(OSError):
        well.pread(1, 0)
    assert well.pread(1, 0) == b""  # that fault was spent
    fs.heal()
    sick.fsync()


def test_a_full_disk_takes_a_short_write_then_refuses():
    fs, d = _disk()
    f = fs.open(f"{d}/a")
    fs.limit_space(5, d)
    with pytest.raises(OSError) as raised:
        f.append(b"0123456789")
    assert raised.value.errno == errno.ENOSPC
    assert f.size() == 5  # what fit landed, as a short write does
    f.truncate(2)  # gives 3 bytes back
    f.pwrite(b"abc", 2)
    assert f.size() == 5
    with pytest.raises(OSError):
        f.append(b"!")
    fs.heal()
    f.append(b"more")
    assert read_file(f"{d}/a", fs=fs) == b"01abcmore"


def test_a_read_only_directory_refuses_new_files_but_not_open_ones():
    fs, d = _disk()
    f = fs.open(f"{d}/a")
    fs.fail("create", d, errno.EACCES)
    with pytest.raises(PermissionError):
        fs.open(f"{d}/b")
    f.append(b"still writable")
    assert fs.file_size(f"{d}/a") == 14
