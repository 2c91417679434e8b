"""Griffe extension for the API reference (mkdocs.yml): applies ``relaxops.otsort.functional._doc`` statically.

``_doc`` replaces the line ``{common}`` of a decorated function's docstring with the module's ``_DOC_ARGS`` when
the module is imported; griffe reads the source without importing it, so it does the same replacement here."""

from __future__ import annotations

import ast
import textwrap

import griffe


class DocArgs(griffe.Extension):
    def on_module(self, *, mod: griffe.Module, **kwargs) -> None:
        common = mod.members.get("_DOC_ARGS")
        if common is None or common.value is None:
            return
        # griffe keeps docstrings dedented: the Args entries are indented by 4, not 8
        lines = textwrap.dedent(ast.literal_eval(str(common.value)).strip("\n")).splitlines()
        for member in mod.members.values():
            if member.is_alias or not member.is_function or member.docstring is None:
                continue
            if any(str(d.value) == "_doc" for d in member.decorators):
                member.docstring.value = member.docstring.value.replace("{common}", "\n    ".join(lines))
