"""docs/reference/environment.md: the environment variables the kit and gan3d read, found in the
code (an AST walk), each with the modules that read it and its meaning from MEANINGS.

A read is `os.environ.get(K)`, `os.environ[K]`, `os.getenv(K)`, `K in os.environ`, `.setdefault`
or `.pop` on the environment, or the same on a name bound to it (`environ`, `env = os.environ if
... else ...`). K is a string, a module's constant (a string, or a tuple or dict of them, also
imported from another module), or a name that a loop or comprehension over one binds in this or an
enclosing function (`{name: value(name) for name in NAMES}` with `value` reading `env.get(name)`).
A read whose K it cannot name is reported, not guessed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kit.reference.markdown import GENERATED, paragraph, table

PACKAGES = ("kit", "gan3d")
_READS = ("get", "setdefault", "pop", "__getitem__")

# Said of the variables a run records (gan3d.results, gan3d.runtime) to tell runs apart.
_FABRIC = "recorded in results (`mpi_fabric`)"
_HOROVOD = "recorded in results (`horovod_settings`)"
_RUN = "recorded in results (`thread_env`)"
_WORLD = "a rank checks that it joined the job its launcher started"
# One line per variable: what it changes. tests/docs/test_reference.py fails when the code reads a
# variable this table does not describe.
MEANINGS = {
    "APPTAINER_CONTAINER": "set by `apptainer exec` in its container: "
    "results record the run as `apptainer`",
    "CH_RUNNING": "set by `ch-run` in a Charliecloud container: results record the run as `charliecloud`",
    "FI_PROVIDER": f"libfabric's provider (Intel MPI, MPICH ch4:ofi); {_FABRIC}",
    "GAN3D_FORMS": "`gan3d train --forms` when the option is not given (default `auto`)",
    "HOME": "your home: where the kit's cache and state are when no XDG variable moves them",
    "HOROVOD_AUTOTUNE": f"Horovod's autotuning; {_HOROVOD}",
    "HOROVOD_CACHE_CAPACITY": f"Horovod's response cache size; {_HOROVOD}",
    "HOROVOD_CPU_OPERATIONS": f"Horovod's CPU collectives backend; {_HOROVOD}",
    "HOROVOD_CYCLE_TIME": f"Horovod's fusion cycle time; {_HOROVOD}",
    "HOROVOD_FUSION_THRESHOLD": f"Horovod's tensor fusion buffer; {_HOROVOD}",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": f"Horovod's hierarchical allreduce; {_HOROVOD}",
    "HOROVOD_TIMELINE": f"Horovod's timeline file; {_RUN}",
    "I_MPI_FABRICS": f"Intel MPI's fabrics; {_FABRIC}",
    "I_MPI_JOB_RESPECT_PROCESS_PLACEMENT": f"Intel MPI's rank placement under Slurm; {_RUN}",
    "I_MPI_OFI_PROVIDER": f"Intel MPI's libfabric provider; {_FABRIC}",
    "I_MPI_PIN_DOMAIN": f"Intel MPI's pinning of a rank's threads; {_RUN}",
    "I_MPI_PIN_RESPECT_CPUSET": f"Intel MPI's pinning within the job's CPU set; {_RUN}",
    "KIT_CACHE": "moves the kit's cache (gan3d's layer forms, udocker's tools, `kit vcluster`'s Intel MPI, "
    "`make lock`'s wheel checks, the set-up's downloads); default `$XDG_CACHE_HOME/secure-site-kit`",
    "KIT_CRASH_DIR": "where an internal error's traceback goes; default `$XDG_STATE_HOME/secure-site-kit`",
    "KIT_DEBUG": "1: print an internal error's traceback instead of writing it to a file (as `--debug`)",
    "KIT_IMAGE_DIGEST": "the image's digest, exported by the batch script; recorded in results",
    "KIT_RUN_ID": "the run's id, exported by the batch script; recorded in results (`run_id`)",
    "KIT_SITE_PATH": "directories (`:`-separated) searched first for a site config given by name",
    "KMP_AFFINITY": f"Intel OpenMP's thread pinning; gan3d's default unless set; {_RUN}",
    "KMP_BLOCKTIME": f"Intel OpenMP's spin time; gan3d's default (0) unless set; {_RUN}",
    "KMP_SETTINGS": f"Intel OpenMP prints its settings; {_RUN}",
    "MPIR_CVAR_CH4_NETMOD": f"MPICH's network module; {_FABRIC}",
    "MPIR_CVAR_OFI_USE_PROVIDER": f"MPICH's libfabric provider; {_FABRIC}",
    "OMPI_COMM_WORLD_SIZE": f"Open MPI's rank count: {_WORLD}",
    "OMPI_MCA_btl": f"Open MPI's byte transfer layers; {_FABRIC}",
    "OMPI_MCA_mtl": f"Open MPI's matching transport layer; {_FABRIC}",
    "OMPI_MCA_pml": f"Open MPI's point-to-point layer; {_FABRIC}",
    "OMP_NUM_THREADS": f"OpenMP threads per rank (gan3d sets it from `--threads`); {_RUN}",
    "OMP_PLACES": f"OpenMP's thread places; {_RUN}",
    "OMP_PROC_BIND": f"OpenMP's thread binding; {_RUN}",
    "PAGER": "the pager of `kit docs TOPIC` on a terminal (empty: none); default `less -R`",
    "PMI_SIZE": f"the PMI rank count (Hydra, srun): {_WORLD}",
    "SINGULARITY_CONTAINER": "set by `singularity exec` in its container: "
    "results record the run as `apptainer`",
    "SLURM_CPUS_PER_TASK": f"Slurm's cores per rank: gan3d's default `--threads`; {_RUN}",
    "SLURM_JOB_ID": "inside a Slurm job: where `kit mpi check --nodes 2` runs; results record it",
    "SLURM_NNODES": f"the job's node count; {_RUN}",
    "SLURM_NTASKS": "Slurm's task count: a run without mpi4py refuses to be one of several ranks",
    "SLURM_NTASKS_PER_NODE": f"the job's ranks per node; {_RUN}",
    "SLURM_STEP_NUM_TASKS": f"an srun step's rank count: {_WORLD}",
    "TF_CPP_MIN_LOG_LEVEL": "TensorFlow's log level; the jobs the kit starts get 2 (warnings) unless set",
    "TF_ENABLE_ONEDNN_OPTS": f"TensorFlow's oneDNN kernels on or off; {_RUN}",
    "TF_NUM_INTEROP_THREADS": f"TensorFlow's inter-op threads; {_RUN}",
    "TF_NUM_INTRAOP_THREADS": f"TensorFlow's intra-op threads; {_RUN}",
    "UCX_NET_DEVICES": f"UCX's network devices; {_FABRIC}",
    "UCX_TLS": f"UCX's transports (Open MPI, MPICH ch4:ucx); {_FABRIC}",
    "USER": "`kit mpi check` gives the ranks `root` where it is unset (`ch-run` refuses to start without)",
    "XDG_CACHE_HOME": "base of the kit's cache (`$XDG_CACHE_HOME/secure-site-kit` unless `KIT_CACHE` "
    "is set); default `~/.cache`; a relative path is ignored",
    "XDG_CONFIG_HOME": "base of your own site configs (`$XDG_CONFIG_HOME/kit/sites`); default `~/.config`",
    "XDG_STATE_HOME": "base of the crash reports' directory; default `~/.local/state`; "
    "a relative path is ignored",
    "container_execmode": "set by `udocker run` in its container: results record the run as `udocker`",
    "container_root": "set by `udocker run` in its container: results record the run as `udocker`",
}


@dataclass
class Found:
    """What the walk found: each variable with the modules that read it, and the reads whose name
    it could not work out (`module:line`)."""

    readers: dict[str, set[str]] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)


def sources() -> Iterator[tuple[str, Path]]:
    """(module name, file) of every module of the kit and gan3d."""
    for package in PACKAGES:
        top = Path(str(resources.files(package)))
        for path in sorted(top.rglob("*.py")):
            rel = path.relative_to(top.parent).with_suffix("")
            if "_data" not in rel.parts:
                yield ".".join(rel.parts).removesuffix(".__init__"), path


def scan(modules: dict[str, ast.Module]) -> Found:
    """Every read of the environment in ``modules`` (module name: parsed source)."""
    found = Found()
    for name, tree in modules.items():
        _Module(name, tree, modules, found).visit(tree)
    return found


def found_in_code() -> Found:
    return scan({name: ast.parse(path.read_text(), str(path)) for name, path in sources()})


def render() -> str:
    found = found_in_code()
    rows = [
        [f"`{var}`", ", ".join(f"`{m}`" for m in sorted(mods)), MEANINGS.get(var, "")]
        for var, mods in sorted(found.readers.items(), key=lambda kv: kv[0].upper())
    ]
    intro = paragraph(
        "Every environment variable the kit and gan3d read, found in their code, "
        "with the modules that read it. "
        "What the ranks of a job are given is the site config's `host_mpi.env` (`kit docs "
        "reference/site-config`) and the pair's settings (`kit docs reference/files`)."
    )
    listed = table(["variable", "read by", "meaning"], rows, (34, 60, 94))
    return f"# Environment variables\n\n{paragraph(GENERATED)}\n\n{intro}\n\n{listed}"


class _Module(ast.NodeVisitor):
    """The reads in one module; names of the environment and loop variables are tracked per
    function (a nested function sees its parents')."""

    def __init__(self, name: str, tree: ast.Module, modules: dict[str, ast.Module], found: Found):
        self.name, self.tree, self.modules, self.found = name, tree, modules, found
        self.scopes: list[ast.AST] = [tree]

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.scopes.append(node)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and node.args:
            if func.attr == "getenv" and _is_name(func.value, "os"):
                self.read(node.args[0], node)
            elif func.attr in _READS and self.is_environ(func.value):
                self.read(node.args[0], node)
        elif isinstance(func, ast.Name) and func.id == "getenv" and node.args:
            self.read(node.args[0], node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and self.is_environ(node.value):
            self.read(node.slice, node)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)) and self.is_environ(right):
                self.read(node.left, node)
        self.generic_visit(node)

    def is_environ(self, node: ast.AST, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``node`` is the environment: os.environ, a name bound to it, or an expression
        of them (`os.environ if environ is None else environ`, `dict(os.environ)`)."""
        if isinstance(node, ast.Attribute):
            return node.attr == "environ" and _is_name(node.value, "os")
        if isinstance(node, ast.Name):
            return node.id == "environ" or (
                node.id not in seen
                and any(self.is_environ(v, seen | {node.id}) for v in self.bound(node.id))
            )
        if isinstance(node, ast.IfExp):
            return self.is_environ(node.body, seen) or self.is_environ(node.orelse, seen)
        if isinstance(node, ast.BoolOp):
            return any(self.is_environ(v, seen) for v in node.values)
        if isinstance(node, ast.Call) and _is_name(node.func, "dict") and node.args:
            return self.is_environ(node.args[0], seen)
        return False

    def bound(self, name: str) -> list[ast.AST]:
        """What ``name`` is assigned in the enclosing functions (not the module: only a function's
        own names stand for the environment)."""
        values: list[ast.AST] = []
        for scope in self.scopes[1:]:
            for node in ast.walk(scope):
                if isinstance(node, ast.Assign) and any(_is_name(t, name) for t in node.targets):
                    values.append(node.value)
                elif isinstance(node, ast.AnnAssign) and _is_name(node.target, name) and node.value:
                    values.append(node.value)
        return values

    def read(self, key: ast.AST, at: ast.AST) -> None:
        names = self.strings(key)
        if not names:
            self.found.unresolved.append(f"{self.name}:{getattr(at, 'lineno', '?')}")
        for var in names:
            self.found.readers.setdefault(var, set()).add(self.name)

    def strings(self, key: ast.AST) -> list[str]:
        """The variable names ``key`` stands for: a string, a constant, or a loop variable over
        one in an enclosing function."""
        got = _Constants(self.name, self.modules).strings(key)
        if got or not isinstance(key, ast.Name):
            return got
        for scope in reversed(self.scopes):
            for node in ast.walk(scope):
                for target, source in _loops(node):
                    if _is_name(target, key.id):
                        got += _Constants(self.name, self.modules).strings(source)
                    elif isinstance(target, ast.Tuple) and _is_name(target.elts[0], key.id):
                        got += _Constants(self.name, self.modules).strings(source)
            if got:
                break
        return got


class _Constants:
    """Strings a module-level constant holds: a string, a tuple/list/set of them, a dict's keys,
    sums of these; a name imported from another module of the kit or gan3d is looked up there."""

    def __init__(self, module: str, modules: dict[str, ast.Module]):
        self.module, self.modules = module, modules

    def strings(self, node: ast.AST, depth: int = 0) -> list[str]:
        if depth > 10:
            return []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [s for e in node.elts for s in self.strings(e, depth + 1)]
        if isinstance(node, ast.Dict):
            return [s for k in node.keys if k is not None for s in self.strings(k, depth + 1)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.strings(node.left, depth + 1) + self.strings(node.right, depth + 1)
        if isinstance(node, ast.Starred):
            return self.strings(node.value, depth + 1)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("items", "keys"):
                return self.strings(node.func.value, depth + 1)
        if isinstance(node, ast.Name):
            return self.constant(node.id, depth)
        return []

    def constant(self, name: str, depth: int) -> list[str]:
        tree = self.modules.get(self.module)
        if tree is None:
            return []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(_is_name(t, name) for t in node.targets):
                return self.strings(node.value, depth + 1)
            if isinstance(node, ast.AnnAssign) and _is_name(node.target, name) and node.value:
                return self.strings(node.value, depth + 1)
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        other = _Constants(node.module, self.modules)
                        return other.constant(alias.name, depth + 1)
        return []


def _loops(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, iterable) of a for loop or a comprehension's generators."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [(node.target, node.iter)]
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return [(g.target, g.iter) for g in node.generators]
    return []


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name
