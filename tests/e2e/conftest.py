"""Shared fixtures for the dg end-to-end conformance tests.

Every test is parametrized over `mode`: the interpreter and compiled code
(CPU) must give the same results as NumPy. A dg module is built once per
(source, mode) and shared by all tests that use it (util.load_src and
util.load_prog keep the cache).
"""
import pytest


@pytest.fixture(params=["interp", "compiled"], scope="session")
def mode(request):
    return request.param
