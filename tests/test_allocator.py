"""lopd.allocator: freed large blocks are reused instead of faulted in again."""

import platform
import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
if sys.argv[1] == "keep":
    from lopd.allocator import keep_freed_memory
    assert keep_freed_memory()
for _ in range(8):  # warm up: the first allocations fault their pages in either way (the heap
    # grows over the first few; 4 on a 2-core AVX-512 box)
    torch.ones(8 << 20).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # 32 MiB each, freed at once
    torch.ones(8 << 20).sum()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="glibc only")
def test_keeping_freed_memory_stops_page_faults_on_reuse():
    faults = {}
    for mode in ("system", "keep"):
        out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                             check=True)
        faults[mode] = int(out.stdout.split()[-1])
    # 20 fresh 32 MiB blocks fault in ~8k pages each without it; with it the heap grows once
    # or twice and its blocks are reused
    assert faults["system"] > 20 * 4000
    assert faults["keep"] < faults["system"] / 5
