"""No tampered or planted entry of the program cache's disk tier ever runs (issue 43).

The tier stores programs and native kernels (shared objects the host runtime dlopens). These
tests play the attacker: they plant a shared object whose constructor writes a marker file,
with the plain FNV-1a checksum an attacker can compute, directly in the cache or by swapping
the whole directory after the tier checked it; they flip payload bytes and re-checksum; they
mutate program fields and re-sign the entries with the user's real key (the deserializer must
reject them, not crash). They also check the directory and key rules and concurrent writers.

Each case runs fresh interpreters with their own TORCH_TPU_CACHE_DIR and TORCH_TPU_CACHE_KEY_FILE
under tmp_path, because the tier is configured once per process at import.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEADER = struct.Struct("<8sIIQQ32s")  # magic, format version, key words, payload length, FNV-1a, MAC
NATIVE_TAG = 0x4E41544956454B31  # "NATIVEK1": a native kernel entry's first key word
OTHER_UID = 54321
REPO = Path(__file__).resolve().parents[2]  # children import this checkout's torch_tpu from any cwd

# Elementwise chains and a row reduction in fused mode (clusters that get native kernels when
# TORCH_TPU_NATIVE_KERNELS=sync), plus per-op programs in strict mode.
CHILD = textwrap.dedent(
    """
    import json, os, sys, threading, torch, torch_tpu
    swap = os.environ.get("TEST_SWAP")
    if swap:  # the attacker, after the tier checked and opened the directory at import
        real, planted = swap.split(os.pathsep)
        t = threading.Thread(target=lambda: (os.rename(real, real + ".away"), os.rename(planted, real)))
        t.start(); t.join()
    if os.environ.get("TEST_CHDIR"):
        os.chdir(os.environ["TEST_CHDIR"])
    torch.manual_seed(0)
    a, b = torch.randn(64, 96), torch.randn(64, 96)
    x, y = a.to("tpu"), b.to("tpu")
    pairs = {}
    with torch_tpu.mode(os.environ.get("TEST_MODE", "fused")):
        pairs["chain"] = (((x * 1.5 + 0.25) * y - x.abs()).relu() + 2.0, ((a * 1.5 + 0.25) * b - a.abs()).relu() + 2.0)
        pairs["rows"] = ((x * y + 1.0).sum(1), (a * b + 1.0).sum(1))
        pairs["mm"] = (x @ y.T, a @ b.T)
        z = x.clone(); z.mul_(3.0)
        pairs["inplace"] = (z, a * 3.0)
        pairs["max"] = (x.max(0).values, a.max(0).values)
        pairs["arange"] = (torch.arange(3, 11, 2, device="tpu"), torch.arange(3, 11, 2))
        got = {k: t.cpu() for k, (t, _) in pairs.items()}
    bad = [k for k, (_, c) in pairs.items() if not torch.allclose(got[k], c, atol=1e-4, rtol=1e-4)]
    print(json.dumps({"bad": bad, "native": torch_tpu._C._native_kernel_stats(),
                      "compiled": torch_tpu.metrics()["programs_compiled"], "disk": torch_tpu.cache_stats()}))
    """
)


def env_for(tmp_path: Path, cache_dir: str | os.PathLike, **extra: str) -> dict:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir), TORCH_TPU_CACHE_KEY_FILE=str(key_file(tmp_path)),
               TORCH_TPU_NATIVE_KERNELS="sync",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.update(extra)
    return env


def key_file(tmp_path: Path) -> Path:
    return tmp_path / "config" / "cache.key"


def start(tmp_path: Path, cache_dir: str | os.PathLike, cwd: Path | None = None, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env_for(tmp_path, cache_dir, **extra), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{out}\n{err}"
    report = json.loads(out.strip().splitlines()[-1])
    assert report["bad"] == [], f"results differ from CPU: {report['bad']}\n{err}"
    return report, err


def run(tmp_path: Path, cache_dir: str | os.PathLike, **extra: str) -> tuple[dict, str]:
    return finish(start(tmp_path, cache_dir, **extra))


def import_only(tmp_path: Path, cache_dir: str | os.PathLike) -> tuple[dict, str]:
    code = "import json, torch_tpu; print(json.dumps(torch_tpu.cache_stats()))"
    proc = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path, cache_dir), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


# -- the entry format, as an attacker (or the user, re-signing) writes it ----------------------

def fnv1a(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read_entry(path: Path) -> tuple[tuple, list[int], bytes]:
    data = path.read_bytes()
    header = HEADER.unpack_from(data)
    nwords = header[2]
    words = list(struct.unpack_from(f"<{nwords}q", data, HEADER.size))
    return header, words, data[HEADER.size + 8 * nwords:]


def write_entry(path: Path, header: tuple, words: list[int], payload: bytes, key: bytes | None = None) -> None:
    """Writes the entry with a fresh FNV-1a checksum; re-signed when `key` is given (else the old MAC)."""
    raw_words = struct.pack(f"<{len(words)}q", *words)
    magic, version, _, _, _, mac = header
    checksum = fnv1a(payload, fnv1a(raw_words))
    signed = struct.pack("<8sIIQQ", magic, version, len(words), len(payload), checksum)
    if key is not None:
        msg = b"torch_tpu program cache entry\0" + path.parent.name.encode() + b"\0" + signed + raw_words + payload
        mac = hmac.new(key, msg, hashlib.sha256).digest()
    path.write_bytes(signed + mac + raw_words + payload)


def entries(root: Path) -> list[Path]:
    return sorted(root.rglob("*.tpp"))


def native_entries(root: Path) -> list[Path]:
    return [p for p in entries(root) if read_entry(p)[1][0] == NATIVE_TAG]


def planted_library(tmp_path: Path, symbol: str, marker: Path) -> bytes:
    """A shared object whose constructor writes `marker` and whose kernel symbol does nothing."""
    src = tmp_path / "planted.c"
    src.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
          FILE* f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}
        }}
        void {symbol}(float* const* s, long n, void* step, void* ctx) {{ (void)s; (void)n; (void)step; (void)ctx; }}
        """))
    lib = tmp_path / "planted.so"
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "the native tier needs a C compiler, so the test does too"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=60)
    return lib.read_bytes()


def plant_native_code(tmp_path: Path, root: Path, marker: Path) -> int:
    """Replaces every native kernel entry under root by a planted library; returns how many."""
    planted = 0
    for path in native_entries(root):
        header, words, _ = read_entry(path)
        source = struct.pack(f"<{len(words) - 3}q", *words[3:])[: words[2]].decode()
        symbol = source[source.index("tpu_native_"):].split("(")[0]
        write_entry(path, header, words, planted_library(tmp_path, symbol, marker))  # old MAC: a forgery
        planted += 1
    return planted


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache (and its key) filled once by a fused-mode run: programs and native kernels."""
    base = tmp_path_factory.mktemp("filled")
    cold, _ = run(base, base / "cache")
    assert cold["native"]["loaded"] >= 1 and cold["disk"]["writes"] > cold["native"]["loaded"], cold
    return base


def copy_of(filled: Path, tmp_path: Path) -> Path:
    """This test's own copy of the filled cache (modes kept) and key; returns the cache root."""
    shutil.copytree(filled / "cache", tmp_path / "cache")
    key_file(tmp_path).parent.mkdir(mode=0o700)
    shutil.copy2(key_file(filled), key_file(tmp_path))
    return tmp_path / "cache"


# -- directory rules ---------------------------------------------------------------------------

def assert_refused(tmp_path: Path, cache_dir: Path, named: Path, reason: str) -> None:
    stats, err = import_only(tmp_path, cache_dir)
    assert not stats["enabled"], err
    assert "refusing" in err and str(named) in err and reason in err, err
    assert "Fix: point TORCH_TPU_CACHE_DIR at a directory" in err, err


def test_a_world_writable_cache_dir_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert_refused(tmp_path, shared, shared, "writable by group or others (mode 0777)")
    assert list(shared.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_a_cache_dir_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    assert_refused(tmp_path, theirs, theirs, f"owned by another user (uid {OTHER_UID})")
    assert list(theirs.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a link to another user")
def test_a_cache_dir_reached_through_another_users_link_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(mine)
    os.lchown(link, OTHER_UID, OTHER_UID)
    assert_refused(tmp_path, link, link, "symbolic link owned by another user")
    assert list(mine.iterdir()) == []


def test_a_cache_under_a_renameable_parent_is_refused_but_sticky_is_fine(tmp_path: Path) -> None:
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    assert_refused(tmp_path, parent / "cache", parent, "writable by group or others and not sticky")
    assert not (parent / "cache").exists()
    parent.chmod(0o1777)  # as /tmp: others cannot rename what they do not own
    stats, err = import_only(tmp_path, parent / "cache")
    assert stats["enabled"], err


def test_the_key_file_is_private_and_refused_when_exposed(tmp_path: Path) -> None:
    stats, err = import_only(tmp_path, tmp_path / "cache")
    assert stats["enabled"], err
    key = key_file(tmp_path)
    assert key.stat().st_size == 32 and (key.stat().st_mode & 0o777) == 0o600
    assert not str(key).startswith(str(tmp_path / "cache"))
    key.chmod(0o644)
    stats, err = import_only(tmp_path, tmp_path / "cache")
    assert not stats["enabled"]
    assert "no usable key" in err and str(key) in err and "group or others" in err, err


def test_a_relative_cache_dir_does_not_follow_chdir(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    report, err = finish(start(tmp_path, "rel", cwd=tmp_path / "a", TEST_CHDIR=str(tmp_path / "b")))
    assert report["disk"]["directory"].startswith(str(tmp_path / "a" / "rel") + "/"), report["disk"]
    assert report["disk"]["writes"] > 0
    assert len(entries(tmp_path / "a" / "rel")) == report["disk"]["writes"]
    assert not (tmp_path / "b" / "rel").exists(), "writes after chdir must go to the directory opened at import"


# -- planted and tampered entries ---------------------------------------------------------------

def test_planted_native_code_in_the_cache_never_runs(filled: Path, tmp_path: Path) -> None:
    root = copy_of(filled, tmp_path)
    marker = tmp_path / "planted_ran"
    planted = plant_native_code(tmp_path, root, marker)
    assert planted >= 1

    victim, err = run(tmp_path, root)
    assert not marker.exists(), "the planted library's constructor ran"
    assert victim["native"]["from_disk"] == 0
    assert victim["native"]["loaded"] >= 1, "recompiled instead"
    assert victim["disk"]["corrupt"] == planted
    assert "authentication failed" in err, err


def test_a_directory_swapped_after_the_check_is_never_read(filled: Path, tmp_path: Path) -> None:
    root = copy_of(filled, tmp_path)
    planted_root = tmp_path / "planted"
    shutil.copytree(root, planted_root)
    marker = tmp_path / "planted_ran"
    assert plant_native_code(tmp_path, planted_root, marker) >= 1
    # Also re-sign the planted tree's native entries with a key the attacker made up.
    for path in native_entries(planted_root):
        write_entry(path, *read_entry(path), key=os.urandom(32))

    victim, err = run(tmp_path, root, TEST_SWAP=f"{root}{os.pathsep}{planted_root}")
    assert not marker.exists(), "the planted library's constructor ran"
    assert not planted_root.exists() and (tmp_path / "cache.away").is_dir(), "the swap happened"
    # The tier kept reading the directory it opened: the genuine entries, now renamed away.
    assert victim["disk"]["corrupt"] == 0, err
    assert victim["native"]["from_disk"] >= 1 and victim["compiled"] == 0
    assert victim["disk"]["writes"] == 0


def test_a_tampered_entry_with_a_valid_checksum_is_discarded_and_recompiled(filled: Path, tmp_path: Path) -> None:
    root = copy_of(filled, tmp_path)
    programs = [p for p in entries(root) if read_entry(p)[2].startswith(b"TPP1")]
    assert len(programs) >= 3
    for path in programs[:3]:
        header, words, payload = read_entry(path)
        payload = bytearray(payload)
        payload[len(payload) // 2] ^= 0x5A
        write_entry(path, header, words, bytes(payload))  # FNV-1a recomputed, MAC left as it was

    damaged, err = run(tmp_path, root, TEST_MODE="strict")
    assert damaged["disk"]["corrupt"] == 3
    assert "program disk cache" in err and "authentication failed" in err, err
    assert damaged["compiled"] == 3 and damaged["disk"]["writes"] == 3, "recompiled and written again"
    for path in programs[:3]:  # rewritten as they were before the tampering
        assert path.read_bytes() == (filled / path.relative_to(tmp_path)).read_bytes(), path


# -- structurally invalid programs, correctly signed --------------------------------------------

def program_fields(payload: bytes, bindings_only: bool = False) -> list[tuple[int, str, int]]:
    """(offset, struct format, invalid value) for each structural field of a program payload
    (with bindings_only, only the parameters' binding indices, when there are any)."""
    fields: list[tuple[int, str, int]] = []
    bindings: list[tuple[int, str, int]] = []
    pos = 4  # "TPP1"

    def take(fmt: str) -> int:
        nonlocal pos
        (v,) = struct.unpack_from("<" + fmt, payload, pos)
        pos += struct.calcsize(fmt)
        return v

    def vec(fmt: str) -> list[tuple[int, int]]:
        n = take("I")
        out = []
        for _ in range(n):
            out.append((pos, take(fmt)))
        return out

    nodes = take("I")
    fields.append((0 + 4, "I", nodes + 1))
    for i in range(nodes):
        kind_at, kind = pos, take("B")
        fields.append((kind_at, "B", 255))
        fields.append((pos, "b", 127))
        take("b")
        for at, _ in vec("q"):
            fields.append((at, "q", -1))
        for at, _ in vec("i"):
            fields.append((at, "i", i))  # not earlier than the node
        iattrs = vec("q")
        if kind == 0 and iattrs:  # kParameter: its binding (checked against the call, not the payload)
            fields.append((iattrs[0][0], "q", 1000))
            bindings.append(fields[-1])
        vec("d")
    outputs = take("I")
    for _ in range(outputs):  # node, target, new index (i32 each), snapshot flag (u8)
        fields += [(pos, "i", nodes), (pos + 4, "i", 1000), (pos + 8, "i", 1000)]
        pos += 13
    news = take("I")
    for _ in range(news):
        fields.append((pos, "b", 127))
        pos += 1
        for at, _ in vec("q"):
            fields.append((at, "q", -1))
        pos += 1
    returns_at = pos
    fields.append((returns_at, "I", take("I") + 1000))
    return bindings if bindings_only and bindings else fields


def test_signed_entries_with_invalid_fields_are_rejected_not_run(filled: Path, tmp_path: Path) -> None:
    root = copy_of(filled, tmp_path)
    originals = {p: p.read_bytes() for p in entries(root) if read_entry(p)[2].startswith(b"TPP1")}
    assert len(originals) >= 5
    key = key_file(tmp_path).read_bytes()
    rng = random.Random(43)
    mutated_total = 0
    # 4 rounds x every program entry: well over 40 mutated entries. Round 0 points parameters
    # at bindings the call does not have, in fused mode (where that crashed fusion's composition).
    for round_ in range(4):
        for path, data in originals.items():
            path.write_bytes(data)
            header, words, payload = read_entry(path)
            at, fmt, value = rng.choice(program_fields(payload, bindings_only=round_ == 0))
            payload = bytearray(payload)
            struct.pack_into("<" + fmt, payload, at, value)
            write_entry(path, header, words, bytes(payload), key=key)
            mutated_total += 1
        report, err = run(tmp_path, root, TEST_MODE="fused" if round_ % 2 == 0 else "strict")
        # Every mutated entry was looked up, rejected (not run) and recompiled.
        assert report["disk"]["corrupt"] == len(originals) and "corrupt" in err, err
        assert report["compiled"] == len(originals)
        assert "authentication failed" not in err, "re-signed entries must pass the MAC and fail validation"
        for path in originals:  # the run rewrote each entry it discarded; restore for the next round
            path.unlink(missing_ok=True)
    assert mutated_total >= 40


def test_concurrent_writers_leave_only_authentic_entries_within_the_bound(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    bound = 20000  # below what the workload writes: the writers evict while they race
    procs = [start(tmp_path, root, TORCH_TPU_CACHE_MAX_BYTES=str(bound), TEST_MODE=mode)
             for mode in ("fused", "strict", "fused", "strict")]
    reports = [finish(p)[0] for p in procs]
    assert not list(root.rglob(".tmp.*")), "temporary files must be renamed or removed"
    assert sum(r["disk"]["writes"] for r in reports) > 0 and sum(r["disk"]["evictions"] for r in reports) > 0
    warm, err = run(tmp_path, root, TORCH_TPU_CACHE_MAX_BYTES=str(bound))
    assert warm["disk"]["corrupt"] == 0, err
    files = entries(root)
    assert files
    key = key_file(tmp_path).read_bytes()
    for path in files:  # every entry is whole and signed with the user's key
        raw = path.read_bytes()
        header, words, payload = read_entry(path)
        raw_words = raw[HEADER.size:HEADER.size + 8 * len(words)]
        assert header[3] == len(payload) and header[4] == fnv1a(payload, fnv1a(raw_words)), path
        msg = b"torch_tpu program cache entry\0" + path.parent.name.encode() + b"\0" + raw[:32] + raw[HEADER.size:]
        assert hmac.compare_digest(header[5], hmac.new(key, msg, hashlib.sha256).digest()), path
        assert (path.stat().st_mode & 0o077) == 0
    assert sum(p.stat().st_size for p in files) <= bound
