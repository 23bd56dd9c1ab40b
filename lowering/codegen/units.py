"""What the code generator takes and what it hands on, each as one object.

A `Unit` is one specialization's dg IR at the `grad` stage and the entry to make callable: its
text (what the disk cache's key is made of) and its parsed module (what the pipeline lowers),
each made from the other the first time it is asked for, so that a program the disk cache
holds is never parsed and a module made in this process is printed once. An `LlvmUnit` is what
lowering it gives (lowering.codegen.lower): the LLVM IR text, the optimization level due to it,
and the tables the executor needs besides the code, which code generation (lowering.codegen.
tiers, objects, optimizer) makes object code of.
"""
from __future__ import annotations

from dg.dialects.dialect import asm, parse


class Unit:
    """The `grad`-stage IR of a program to compile (`text`, `module`: give either or both, the
    same IR), and `entry`: the one function to make callable (None: every function)."""

    __slots__ = ("_text", "_module", "entry")

    def __init__(self, text: str | None = None, module=None, entry: str | None = None):
        if text is None and module is None:
            raise ValueError("a Unit needs the IR's text or its module")
        self._text, self._module, self.entry = text, module, entry

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = asm(self._module)
        return self._text

    @property
    def module(self):
        if self._module is None:
            self._module = parse(self._text)
        return self._module

    def parsed(self) -> bool:
        """Whether the module is made (a caller that has it to spare may drop the text)."""
        return self._module is not None


class LlvmUnit:
    """A program's LLVM IR (`text`), the LLVM optimization `level` due to it, and `meta`: what
    the executor needs besides the code (the signatures of its callable functions, the tables of
    its checks, host calls, allocation and call sites, a target's own, the passes' seconds)."""

    __slots__ = ("text", "level", "meta")

    def __init__(self, text: str, level: int, meta: dict):
        self.text, self.level, self.meta = text, level, meta

    @property
    def lines(self) -> int:
        return self.text.count("\n")
