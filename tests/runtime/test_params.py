"""dg.save and dg.load_params (dg/params.py): round trips of nested trees of several dtypes, the
file format, and every bad file or tree a DgError located at the caller's line."""
import io
import json
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest

import dg
from dg.params import TREE

BF16 = np.dtype(ml_dtypes.bfloat16)


def _tree():
    rng = np.random.default_rng(0)
    return {
        "params": {"w1": rng.standard_normal((3, 4)).astype(np.float32), "b1": np.zeros(4, np.float64)},
        "layers": [
            {"w": rng.standard_normal((2, 2)).astype(BF16), "b": np.arange(2, dtype=np.float16)},
            (np.array([1, -2], np.int32), np.array(7, np.int64), np.array([True, False])),
        ],
        "step": 3,
        "lr": 0.125,
        "empty": np.zeros((0, 5), np.float32),
        "odd/key%": np.ones(1, np.float32),
        "nothing": {},
        "none_here": [],
    }


def assert_same_tree(got, want):
    """The same structure (types of nodes, keys in order) and the same leaves (dtype, shape, bits)."""
    if isinstance(want, dict):
        assert type(got) is dict and list(got) == list(want), (got, want)
        for k in want:
            assert_same_tree(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same_tree(g, w)
    else:
        w = np.asarray(want)
        assert isinstance(got, np.ndarray), type(got)
        assert got.dtype == w.dtype and got.shape == w.shape, (got.dtype, got.shape, w.dtype, w.shape)
        assert got.tobytes() == w.tobytes()


def test_round_trip_of_a_nested_tree(tmp_path):
    tree = _tree()
    dg.save(tmp_path / "p.npz", tree)
    assert_same_tree(dg.load_params(tmp_path / "p.npz"), tree)
    assert_same_tree(dg.load_params(str(tmp_path / "p.npz")), tree)


@pytest.mark.parametrize("leaf", [np.float32(2.5), 3, 1.5, True, np.arange(6, dtype=BF16).reshape(2, 3),
                                  np.array([np.nan, -0.0, np.inf], np.float64)])
def test_a_tree_that_is_one_leaf(tmp_path, leaf):
    dg.save(tmp_path / "x.npz", leaf)
    got = dg.load_params(tmp_path / "x.npz")
    assert_same_tree(got, leaf)


def test_the_file_is_an_npz_named_by_key_paths(tmp_path):
    dg.save(tmp_path / "p.npz", _tree())
    with np.load(tmp_path / "p.npz") as f:
        names = set(f.files)
        assert {"params/w1", "params/b1", "layers/0/w", "layers/0/b", "layers/1/0", "layers/1/1",
                "layers/1/2", "step", "lr", "empty", "odd%2Fkey%25", TREE} == names
        assert f["layers/0/w"].dtype == np.uint16  # bf16 as its bits
        d = json.loads(f[TREE].tobytes().decode())
    assert d["format"] == "dg.params" and d["version"] == 1
    assert d["tree"]["dict"][1][1]["list"][0]["dict"][0][1] == {"leaf": "layers/0/w", "dtype": "bfloat16",
                                                                "shape": [2, 2]}


def test_save_writes_the_path_given_and_replaces_a_file(tmp_path):
    p = tmp_path / "params"  # no .npz added
    dg.save(p, {"a": np.ones(2)})
    dg.save(p, {"a": np.zeros(3)})
    assert sorted(x.name for x in tmp_path.iterdir()) == ["params"]
    assert_same_tree(dg.load_params(p), {"a": np.zeros(3)})


def test_a_plain_npz_loads_as_a_dict(tmp_path):
    np.savez(tmp_path / "plain.npz", w=np.ones((2, 2), np.float32), b=np.zeros(2))
    got = dg.load_params(tmp_path / "plain.npz")
    assert sorted(got) == ["b", "w"] and got["w"].dtype == np.float32


def test_dg_outputs_save(tmp_path):
    m = dg.loads("def f(x):\n    return x * 2.0, (x, sum(x))\n", mode="compiled")
    tree = {"out": m.f(np.ones(3, np.float32))}
    dg.save(tmp_path / "o.npz", tree)
    assert_same_tree(dg.load_params(tmp_path / "o.npz"), {"out": (np.full(3, 2, np.float32), (np.ones(3, np.float32),
                                                                                    np.float32(3)))})


# ---------------------------------------------------------------- errors, located at the caller
def _line_of(marker: str) -> int:
    """The line of this file that holds `marker`."""
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line)


def _located(e, marker):
    assert type(e.value) is dg.DgError
    assert str(e.value).startswith(f"{__file__}:{_line_of(marker)}:"), str(e.value)


def _write_bytes(path, data: bytes):
    path.write_bytes(data)
    return path


def _rewrite(path, name, data):
    """The .npz at path with entry `name` (a .npy inside) replaced by `data` (or dropped: None)."""
    with zipfile.ZipFile(path) as z:
        items = {n: z.read(n) for n in z.namelist()}
    if data is None:
        items.pop(name)
    else:
        items[name] = data
    with zipfile.ZipFile(path, "w") as z:
        for n, b in items.items():
            z.writestr(n, b)


def _with_tree(path, tree_json: str):
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(tree_json.encode(), np.uint8))
    _rewrite(path, TREE + ".npy", buf.getvalue())


@pytest.mark.parametrize("case, message", [
    ("missing", "no file"),
    ("text", "is not an .npz file of parameters"),
    ("npy", "is not an .npz file"),
    ("truncated", "is not an .npz file of parameters"),
    ("garbled leaf", "is corrupt"),
    ("missing leaf", "has no entry 'params/w1'"),
    ("extra entry", "entries its structure does not name: extra"),
    ("bad json", "is not a tree description"),
    ("other format", "is not a tree description"),
    ("newer version", "another version of dg.save"),
    ("bad node", "a node that is not a dict, tuple, list or leaf"),
    ("wrong shape", "entry 'params/b1' is float64[4], its structure says float64[5]"),
    ("wrong dtype", "entry 'params/b1' is float64[4], its structure says float32[4]"),
])
def test_bad_files_are_located_dg_errors(tmp_path, case, message):
    p = tmp_path / "p.npz"
    dg.save(p, _tree())
    if case == "missing":
        p = tmp_path / "nothing.npz"
    elif case == "text":
        _write_bytes(p, b"w1 = [1, 2, 3]\n")
    elif case == "npy":
        np.save(tmp_path / "a.npy", np.ones(3))
        p = tmp_path / "a.npy"
    elif case == "truncated":
        _write_bytes(p, p.read_bytes()[:200])
    elif case == "garbled leaf":
        _rewrite(p, "params/w1.npy", b"\x93NUMPY garbage")
    elif case == "missing leaf":
        _rewrite(p, "params/w1.npy", None)
    elif case == "extra entry":
        np.savez(tmp_path / "e.npz", extra=np.ones(1))
        with zipfile.ZipFile(tmp_path / "e.npz") as z:
            _rewrite(p, "extra.npy", z.read("extra.npy"))
    else:
        with np.load(p) as f:
            d = json.loads(f[TREE].tobytes().decode())
        b1 = d["tree"]["dict"][0][1]["dict"][1][1]
        text = {"bad json": "{not json",
                "other format": json.dumps({"format": "other", "tree": {}}),
                "newer version": json.dumps({**d, "version": 99}),
                "bad node": json.dumps({**d, "tree": {"set": [1]}}),
                "wrong shape": json.dumps(d).replace(json.dumps(b1), json.dumps({**b1, "shape": [5]})),
                "wrong dtype": json.dumps(d).replace(json.dumps(b1), json.dumps({**b1, "dtype": "float32"})),
                }[case]
        _with_tree(p, text)
    with pytest.raises(dg.DgError, match=message.replace("[", r"\[").replace("]", r"\]")) as e:
        dg.load_params(p)  # LOAD-HERE
    _located(e, "# LOAD-HERE")


@pytest.mark.parametrize("tree, message", [
    ({1: np.ones(2)}, "dict keys must be strings, got 1 at the root"),
    ({"a": [np.ones(2), "text"]}, "a leaf must be an array or a number, got str at 'a/1'"),
    ({"a": None}, "got NoneType at 'a'"),
    ({"a": np.array(["x"])}, "cannot store an array of <U1 at 'a'"),
    ({"a": object()}, "cannot store an array of object at 'a'"),
    ({TREE: np.ones(1)}, "reserved"),
])
def test_trees_save_cannot_store_are_located_dg_errors(tmp_path, tree, message):
    with pytest.raises(dg.DgError, match=message) as e:
        dg.save(tmp_path / "p.npz", tree)  # SAVE-HERE
    _located(e, "# SAVE-HERE")
    assert list(tmp_path.iterdir()) == []  # nothing written, no temporary left


def test_an_unwritable_path_is_a_dg_error(tmp_path):
    with pytest.raises(dg.DgError, match="save: cannot write") as e:
        dg.save(tmp_path / "no" / "such" / "p.npz", {"a": np.ones(1)})  # UNWRITABLE
    _located(e, "# UNWRITABLE")


def test_tracebacks_show_the_users_frame(tmp_path):
    with pytest.raises(dg.DgError) as e:
        dg.load_params(tmp_path / "nothing.npz")
    files = []
    tb = e.value.__traceback__
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert files[0] == __file__
    assert not any(f.endswith("dg/params.py") for f in files), files
    assert sys.modules["dg.params"]


def test_the_caret_is_under_the_call(tmp_path):
    """The place of an error made from Python is the call into dg, not column 1 of its line."""
    with pytest.raises(dg.DgError) as e:
        if True:
            dg.load_params(tmp_path / "nothing.npz")  # CALL-HERE
    line = open(__file__).read().splitlines()[_line_of("# CALL-HERE") - 1]
    assert str(e.value).startswith(f"{__file__}:{_line_of('# CALL-HERE')}:{line.index('dg.load_params') + 1}:")
