"""A user's own reward function, loaded from a Python file (verl's ``custom_reward_function``).

The file needs a function with verl's signature::

    def compute_score(data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None):
        ...
        return 1.0  # a finite float, or a dict with a "score" key whose other numeric keys become metrics

``data_source`` is the row's ``data_source`` column, ``solution_str`` the decoded response,
``ground_truth`` the row's ``reward_model.ground_truth`` and ``extra_info`` the row's ``extra_info``
(None when the dataset has none). verl calls it by keyword, so the parameters must be accepted
under those four names, or positionally in that order; extra parameters need defaults and
``**kwargs`` is fine. A verl reward file therefore ports unchanged::

    fn = load_reward_fn("my_reward.py")                 # the function named compute_score
    fn = load_reward_fn("my_reward.py", name="my_fn")   # another name in the same file
    fn("openai/gsm8k", "#### 42", "42", None)           # -> float

The returned object is picklable (it reloads the file by path on the other side), so it can be sent
to Ray workers.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

PARAMETERS = ("data_source", "solution_str", "ground_truth", "extra_info")
# verl's batch reward manager calls the function once per batch, with a list for each argument.
BATCH_PARAMETERS = ("data_sources", "solution_strs", "ground_truths", "extra_infos")


def _example(name: str, parameters: tuple[str, ...]) -> str:
    return f"def {name}({', '.join(parameters[:3])}, {parameters[3]}=None): ..."


class CustomRewardError(ValueError):
    """The custom reward file or function cannot be used; the message says why and how to fix it."""


def _check_is_file(path: Path) -> None:
    if not path.exists():
        raise CustomRewardError(
            f"Custom reward file {str(path)!r} does not exist: set the reward function path to an "
            f"existing .py file (relative paths are resolved from {str(Path.cwd())!r})."
        )
    if not path.is_file():
        raise CustomRewardError(f"Custom reward path {str(path)!r} is not a file: point it at a .py file.")


def _import_file(path: Path) -> ModuleType:
    _check_is_file(path)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    module_name = f"hybridrl_custom_reward_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CustomRewardError(
            f"Cannot load {str(path)!r} as a Python module: the custom reward file must be a .py file."
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # lets the file use dataclasses, pickle, relative lookups
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        sys.modules.pop(module_name, None)
        raise
    except BaseException as exc:  # SystemExit from a stray sys.exit() is reported like any error
        sys.modules.pop(module_name, None)
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, even for a multi-line message
        raise CustomRewardError(
            f"Importing the custom reward file {str(path)!r} failed: {detail}; fix that file (the original "
            f"traceback is chained to this error): it must import without errors."
        ) from exc
    return module


def _public_callables(module: ModuleType) -> list[str]:
    return sorted(
        n for n, v in vars(module).items() if callable(v) and not n.startswith("_") and not isinstance(v, ModuleType)
    )


def _call_mode(fn: Callable, path: Path, name: str, parameters: tuple[str, ...]) -> str:
    """'keyword' (verl's way of calling) when the four names bind, else 'positional'."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: trust it
        return "positional"
    try:
        sig.bind(**{p: None for p in parameters})
        return "keyword"
    except TypeError:
        pass
    try:
        sig.bind(*([None] * len(parameters)))
        return "positional"
    except TypeError as exc:
        raise CustomRewardError(
            f"Custom reward function {name!r} in {str(path)!r} has the signature {name}{sig}, which "
            f"cannot be called with verl's four arguments ({exc}). It must accept "
            f"({', '.join(parameters)}) positionally or by those names, e.g. "
            f"`{_example(name, parameters)}`; give any extra parameters defaults."
        ) from None


def _resolve(path: Path, name: str, parameters: tuple[str, ...]) -> tuple[Callable, str]:
    module = _import_file(path)
    if not hasattr(module, name):
        found = _public_callables(module)
        raise CustomRewardError(
            f"Custom reward file {str(path)!r} has no attribute {name!r}; callables found: {found}. "
            f"Set the reward function name to one of them, or define `{_example(name, parameters)}`."
        )
    fn = getattr(module, name)
    if not callable(fn):
        raise CustomRewardError(
            f"{name!r} in custom reward file {str(path)!r} is a value of type {type(fn).__name__}, not a function; "
            f"callables found: {_public_callables(module)}."
        )
    return fn, _call_mode(fn, path, name, parameters)


def _top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({t.id: node for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(alias.asname or alias.name).split(".")[0]: node for alias in node.names})
    return names


def _signature_stub(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Callable:
    """A function with ``node``'s parameters and nothing else (defaults, annotations and body dropped), so
    that its signature can be checked without running any of the file's code."""
    stub = copy.deepcopy(node)
    stub.decorator_list, stub.returns, stub.body = [], None, [ast.Pass()]
    args = stub.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
    module = ast.fix_missing_locations(ast.Module(body=[stub], type_ignores=[]))
    namespace: dict[str, Any] = {}
    exec(compile(module, "<reward signature>", "exec"), namespace)  # a bodiless def: nothing of the user's runs
    return namespace[node.name]


def check_reward_file(path: str, name: str = "compute_score", batch: bool = False) -> None:
    """Check ``path`` defines ``name`` with verl's parameters (``batch``: the batch reward manager's), without
    executing the file (``config show`` and validation must not run user code). Raise CustomRewardError
    saying what to fix."""
    parameters = BATCH_PARAMETERS if batch else PARAMETERS
    file = Path(path).expanduser().resolve()
    _check_is_file(file)
    try:
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except SyntaxError as exc:
        raise CustomRewardError(
            f"Custom reward file {str(file)!r} is not valid Python: {exc.msg} at line {exc.lineno}; fix that line."
        ) from None
    except (OSError, ValueError) as exc:
        raise CustomRewardError(f"Cannot read the custom reward file {str(file)!r}: {exc}.") from None
    names = _top_level_names(tree)
    star = any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in tree.body)
    if name not in names:
        if star:  # ``from x import *`` may bring it; the import at run start will tell
            return
        functions = sorted(n for n, node in names.items() if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
        raise CustomRewardError(
            f"Custom reward file {str(file)!r} defines no {name!r}; functions found: {functions}. Set the reward "
            f"function name to one of them, or define `{_example(name, parameters)}`."
        )
    node = names[name]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.decorator_list:
        _call_mode(_signature_stub(node), file, name, parameters)


class CustomRewardFn:
    """A user's reward function behind verl's 4-argument signature ``(data_source, solution_str,
    ground_truth, extra_info) -> float``, or with ``batch`` the batch reward manager's ``(data_sources,
    solution_strs, ground_truths, extra_infos) -> list``; called positionally, it passes the arguments the
    way the function takes them (by verl's names where they bind)."""

    def __init__(self, path: str, name: str, batch: bool = False) -> None:
        self.path, self.name, self.batch = path, name, batch
        self.__qualname__ = f"{name} (from {path})"  # what score_batch names in its errors
        self.parameters = BATCH_PARAMETERS if batch else PARAMETERS
        self._fn, self._mode = _resolve(Path(path), name, self.parameters)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """verl's arguments, positionally or by name; the result is a number, a dict with a "score" key
        (``score_sample``), or for a batch function a list of those."""
        values = {**dict(zip(self.parameters, args, strict=False)), **kwargs}
        if self._mode == "keyword":
            return self._fn(**values)
        return self._fn(*(values[p] for p in self.parameters if p in values))

    def __repr__(self) -> str:
        return f"CustomRewardFn(path={self.path!r}, name={self.name!r})"

    def __getstate__(self) -> dict:
        return {"path": self.path, "name": self.name, "batch": self.batch}

    def __setstate__(self, state: dict) -> None:
        fresh = type(self)(state["path"], state["name"], state["batch"])  # re-imports the file in this process
        self.__dict__.update(fresh.__dict__)


def load_reward_fn(path: str, name: str = "compute_score", batch: bool = False) -> Callable[..., Any]:
    """Load ``name`` from the Python file at ``path``; raise CustomRewardError saying what to fix."""
    resolved = str(Path(path).expanduser().resolve())
    return CustomRewardFn(resolved, name, batch)
