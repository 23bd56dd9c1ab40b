"""What the code generator takes and hands on (lowering/codegen/units.py, tiers.py): a program's
IR as one object, its text and module each made once, from the other, when first asked for."""
import pytest

from dg.dialects.dialect import asm, parse
from dg.lowering.codegen import tiers
from dg.lowering.codegen.units import LlvmUnit, Unit

TEXT = "func.func @f(%x: f64) -> f64 {\n  %y = arith.addf %x, %x : f64\n  return %y : f64\n}"


def test_a_unit_from_text_is_parsed_once_and_only_when_asked():
    u = Unit(TEXT, entry="f")
    assert not u.parsed() and u.text == TEXT and not u.parsed()
    m = u.module
    assert u.parsed() and u.module is m and u.entry == "f"


def test_a_unit_from_a_module_is_printed_once():
    m = parse(TEXT)
    u = Unit(module=m)
    assert u.parsed() and u.entry is None
    assert u.text == asm(m) and u.text is u.text


def test_a_unit_needs_its_ir():
    with pytest.raises(ValueError):
        Unit()


def test_an_llvm_unit_counts_its_lines():
    assert LlvmUnit("define void @f() {\n  ret void\n}\n", 2, {}).lines == 3


def test_quick_code_s_pieces_come_back_as_stored():
    assert tiers._pieces({"pieces": [3, 2, 4]}, b"abcdefghi") == [b"abc", b"de", b"fghi"]
    assert tiers._pieces({}, b"object") == [b"object"]
