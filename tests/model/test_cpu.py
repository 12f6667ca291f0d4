"""model/cpu.py reads the CPU's model name and feature flags from a /proc/cpuinfo, and nothing where there is none."""

from __future__ import annotations

from model.cpu import CPUInfo, cpu_info

X86 = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse2 avx2 fma avx512f
bogomips\t: 4800.00

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse2 avx2 fma avx512f
"""

ARM = """\
processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes
CPU implementer\t: 0x41
"""


def test_the_first_processors_model_and_flags_are_read_in_order(tmp_path):
    (tmp_path / "cpuinfo").write_text(X86)
    assert cpu_info(tmp_path / "cpuinfo") == CPUInfo(
        "Intel(R) Xeon(R) Platinum 8488C", ("fpu", "sse2", "avx2", "fma", "avx512f")
    )


def test_empty_values_are_passed_over_for_the_next_processors(tmp_path):
    (tmp_path / "cpuinfo").write_text("model name\t:\nflags\t:\n\n" + X86)
    assert cpu_info(tmp_path / "cpuinfo").model == "Intel(R) Xeon(R) Platinum 8488C"
    assert "avx2" in cpu_info(tmp_path / "cpuinfo").flags


def test_a_file_without_them_or_no_file_gives_empty_values(tmp_path):
    (tmp_path / "cpuinfo").write_text(ARM)
    assert cpu_info(tmp_path / "cpuinfo") == CPUInfo("", ())
    assert cpu_info(tmp_path / "missing") == CPUInfo("", ())
