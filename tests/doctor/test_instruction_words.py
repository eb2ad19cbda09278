"""The doctor's and auto's reasons name exactly the instructions the CPU has (issue #49: "this CPU
has AVX512-FP16/AMX-FP16 instructions" on a Xeon with AVX512-FP16 and AMX-BF16 but no AMX-FP16)."""

from __future__ import annotations

import pytest

from ampkit.cpu import cpu_capability_choice, cpu_emulation_note, cpu_mode_support, native_instructions

#: the fifth round's Xeon (FIELD.md): AMX for bf16, AVX512-FP16 without AMX-FP16
SAPPHIRE = {"avx2": True, "avx512f": True, "avx512_bf16": True, "avx512_fp16": True, "amx_bf16": True,
            "amx_tile": True, "amx_fp16": False}
GRANITE = {**SAPPHIRE, "amx_fp16": True}
AVX2 = {"avx2": True}


@pytest.mark.parametrize("info, mode, words", [
    (SAPPHIRE, "fp16", " although this CPU has AVX512-FP16 instructions (no AMX-FP16)"),
    (SAPPHIRE, "bf16", " although this CPU has AVX512-BF16 and AMX-BF16 instructions"),
    (GRANITE, "fp16", " although this CPU has AVX512-FP16 and AMX-FP16 instructions"),
    ({"amx_bf16": True, "amx_tile": True}, "bf16", " although this CPU has AMX-BF16 instructions (no AVX512-BF16)"),
    (AVX2, "fp16", ": this CPU has no AVX512-FP16 or AMX-FP16, so fp16 is emulated"),
    (AVX2, "bf16", ": this CPU has no AVX512-BF16 or AMX-BF16, so bf16 is emulated"),
], ids=["spr-fp16", "spr-bf16", "gnr-fp16", "amx-only-bf16", "avx2-fp16", "avx2-bf16"])
def test_the_reason_names_what_the_cpu_has_and_lacks(info, mode, words):
    assert cpu_emulation_note(mode, info) == words


def test_no_instruction_the_cpu_lacks_is_named_as_present():
    for info in (SAPPHIRE, GRANITE, AVX2):
        for mode in ("bf16", "fp16"):
            has, lacks = native_instructions(mode, info)
            note = cpu_emulation_note(mode, info)
            present = note.split("(no ")[0]
            if has:
                assert all(name in present for name in has) and not any(name in present for name in lacks), note
            else:
                assert note.endswith("is emulated") and all(name in note for name in lacks), note


def test_auto_and_the_support_line_use_the_same_names(monkeypatch):
    assert cpu_capability_choice(SAPPHIRE) == ("bf16", "this CPU has AVX512-BF16 and AMX-BF16 instructions for bf16 "
                                                       "matmuls: bf16")
    assert cpu_capability_choice(AVX2) == ("fp32", "this CPU has no AVX512-BF16 or AMX-BF16, so bf16 would be "
                                                   "emulated: fp32")
    import ampkit.cpu as cpu

    monkeypatch.setattr(cpu, "cpu_info", lambda: SAPPHIRE)
    ok, why = cpu_mode_support("fp16", "CPU autocast")
    assert ok and why == "CPU autocast float16; this CPU has AVX512-FP16 instructions (no AMX-FP16)"
