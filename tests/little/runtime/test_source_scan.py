"""The replay-safety scan's holes (issue 16 item 9) and the static import resolution behind
the source identity: each form of reaching a clock or randomness without naming it the plain
way is flagged, and harmless look-alikes are not."""

from __future__ import annotations

import random
import secrets
import time

import pytest

from little.runtime._source import static_imports, unsafe_reads


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # getattr with a literal is folded into the member access
        ("import time\ngetattr(time, 'time')()", ["2: time.time"]),
        ("import datetime\ngetattr(datetime.datetime, 'now')()", ["2: datetime.now"]),
        ("import datetime\ngetattr(getattr(datetime, 'date'), 'today')()", ["2: date.today"]),
        ("import builtins, time\nbuiltins.getattr(time, 'monotonic')()", ["2: time.monotonic"]),
        # a computed getattr on a watched module is unfoldable: always unproven
        (
            "import time\nname = 'ti' + 'me'\ngetattr(time, name)()",
            ["3: getattr(time, <computed>)"],
        ),
        ("import os\ngetattr(os, attr)", ["2: getattr(os, <computed>)"]),
        # __import__ / importlib.import_module with a literal
        ("__import__('time').time()", ["1: time.time"]),
        (
            "import importlib\nimportlib.import_module('time').perf_counter()",
            ["2: time.perf_counter"],
        ),
        ("from importlib import import_module as im\nim('uuid').uuid4()", ["2: uuid.uuid4"]),
        (
            "import importlib\nimportlib.import_module('random')",
            ["2: importlib.import_module('random')"],
        ),
        ("__import__('secrets')", ["1: __import__('secrets')"]),
        (
            "import importlib\nimportlib.import_module('datetime').datetime.now()",
            ["2: datetime.now"],
        ),
        # builtins
        ("import builtins\nbuiltins.__import__('time').time_ns()", ["2: time.time_ns"]),
        ("import builtins as b\nb.__import__('random')", ["2: builtins.__import__('random')"]),
        # sys.modules
        ("import sys\nsys.modules['time'].time()", ["2: time.time"]),
        ("import sys\nsys.modules['random']", ["2: sys.modules['random']"]),
        ("import sys\nsys.modules[name].now()", ["2: sys.modules[<computed>]"]),
        ("import sys\nsys.modules.get('time').time()", ["2: time.time"]),
        ("import sys\nsys.modules.get(name)", ["2: sys.modules.get(<computed>)"]),
        ("from sys import modules\nmodules['os'].urandom(4)", ["2: os.urandom"]),
        # bindings that hand a module on: walrus, tuple unpacking, defaults, arguments
        ("import time\nif (t := time):\n    pass", ["2: binds time"]),
        ("import time\na, b = time, 1", ["2: binds time"]),
        ("import time\n[a, b] = [1, time]", ["2: binds time"]),
        ("import time\ndef f(clock=time):\n    return clock.time()", ["2: binds time"]),
        ("import time\ndef f(clock=time.time):\n    return clock()", ["2: time.time"]),
        ("import time\nasync def f(*, clock=time.monotonic): ...", ["2: time.monotonic"]),
        ("import time\nf = lambda clock=time: clock", ["2: binds time"]),
        ("import time\nrun(time)", ["2: binds time"]),
        ("import time\ndef f():\n    return time", ["3: binds time"]),
        ("import datetime\nd = datetime.datetime", ["2: binds datetime"]),
        ("from datetime import datetime\nclock = datetime", ["2: binds datetime"]),
        ("t = __import__('time')", ["1: binds time"]),
        # star imports of a watched module
        ("from time import *", ["1: from time import *"]),
        ("from datetime import *", ["1: from datetime import *"]),
        ("from os import *", ["1: from os import *"]),
        ("from random import *", ["1: from random import *"]),
    ],
)
def test_the_scan_folds_each_form(source: str, expected: list[str]) -> None:
    assert unsafe_reads(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        "import time\ngetattr(time, 'sleep')(0)",
        "import os\ngetattr(os, 'sep')",
        "getattr(obj, name)",  # not a watched module: nothing to say
        "import sys\nsys.modules['json'].dumps({})",
        "import importlib\nimportlib.import_module('json')",
        "from datetime import datetime\nisinstance(x, datetime)",
        "from datetime import datetime\ndef f(when: datetime) -> datetime:\n    return when",
        "from datetime import datetime\nx: datetime | None = None",
        "from datetime import datetime\ndatetime(2026, 1, 1)",
        "import datetime\ndatetime.timedelta(seconds=3)",
        "def f(time):\n    return time + 1",  # a parameter named time, not the module
        "time = 3\nprint(time)",
        "import time\ntime.sleep(0)",
        "from os import path, environ",
        "record.date",
        "event.time",
    ],
)
def test_the_scan_leaves_harmless_look_alikes_alone(source: str) -> None:
    assert unsafe_reads(source) == []


def test_static_imports_resolve_absolute_relative_and_literal_imports() -> None:
    found, unresolved = static_imports(
        "import json, tests.helpers as h\n"
        "from . import sibling\n"
        "from .sub.mod import name\n"
        "from .. import up\n"
        "import importlib\n"
        "importlib.import_module('proj.plugins')\n"
        "__import__('proj.extra')\n",
        "proj.flows",
    )
    assert found == [
        (1, "json", ()),
        (1, "tests.helpers", ()),
        (2, "proj.flows", ("sibling",)),
        (3, "proj.flows.sub.mod", ("name",)),
        (4, "proj", ("up",)),
        (5, "importlib", ()),
        (6, "proj.plugins", ()),
        (7, "proj.extra", ()),
    ]
    assert unresolved == []


@pytest.mark.parametrize(
    ("source", "package", "what"),
    [
        ("import importlib\nimportlib.import_module(name)", "p", "2: importlib.import_module"),
        ("__import__(f'plugins.{name}')", "p", "1: __import__(<computed>)"),
        ("import builtins\nbuiltins.__import__(name)", "p", "2: builtins.__import__"),
        ("from importlib import import_module\nimport_module(n)", "p", "2: importlib.import_mod"),
        ("import importlib\nimportlib.import_module('.x', 'p')", "p", "2: importlib.import_mod"),
        ("from . import x", None, "1: from . import ... (relative, resolves nowhere"),
        ("from ... import x", "p.q", "1: from ... import ... (relative, resolves nowhere"),
        ("exec(code)", "p", "1: exec(...) runs code the scan cannot follow"),
        ("import runpy\nrunpy.run_path(p)", "p", "2: runpy.run_path(...)"),
        (
            "import importlib.util\nimportlib.util.spec_from_file_location('m', p)",
            "p",
            "2: importlib.util.spec_from_file_location(...)",
        ),
    ],
)
def test_imports_that_cannot_be_resolved_statically_are_named(
    source: str, package: str | None, what: str
) -> None:
    _, unresolved = static_imports(source, package)
    assert len(unresolved) == 1
    assert unresolved[0].startswith(what), unresolved


# -- every clock and randomness root of the standard library, in every form (issue 26 item 4) --

TIME_CLOCKS = (
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "process_time",
    "process_time_ns",
    "thread_time",
    "thread_time_ns",
    "clock_gettime",
    "clock_gettime_ns",
    "localtime",
    "gmtime",
    "ctime",
    "asctime",
    "strftime",
)
"""``time``'s functions that read a clock (the last four read it when given no time)."""
TIME_HARMLESS = {
    "sleep",
    "strptime",
    "mktime",
    "struct_time",
    "get_clock_info",
    "clock_getres",
    "clock_settime",
    "clock_settime_ns",
    "tzset",
    "pthread_getcpuclockid",
}
"""``time``'s functions that read no clock: a clock function missing from both lists (a new
Python's) fails ``test_every_function_of_time_is_either_a_clock_or_known_harmless``."""

ROOTS: list[tuple[str, str]] = [
    *(("time", f) for f in TIME_CLOCKS),
    ("datetime.datetime", "now"),
    ("datetime.datetime", "utcnow"),
    ("datetime.datetime", "today"),
    ("datetime.date", "today"),
    *(("random", f) for f in random.__all__),  # every function, Random and SystemRandom
    *(("secrets", f) for f in secrets.__all__),
    ("os", "urandom"),
    ("os", "getrandom"),
    ("os", "times"),
    ("uuid", "uuid1"),
    ("uuid", "uuid4"),
    ("ssl", "RAND_bytes"),
    ("ssl", "RAND_pseudo_bytes"),
]


def _forms(owner: str, fn: str) -> dict[str, str]:
    """Each form of reaching ``owner.fn`` (seed 003's table, in Python): its source, whose
    last line reaches it."""
    module, _, cls = owner.partition(".")
    path = f"{module}.{cls}" if cls else module  # the owner, from its module
    if cls:  # a class of its module: the from-import takes the class
        from_import = f"from {module} import {cls}\n{cls}.{fn}()"
        alias = f"import {module} as m\nm.{cls}.{fn}()"
    else:
        from_import = f"from {module} import {fn}\n{fn}()"
        alias = f"import {module} as m\nm.{fn}()"
    return {
        "attribute": f"import {module}\n{path}.{fn}()",
        "subscript": f"import {module}\n{path}.__dict__[{fn!r}]",
        "dict-get": f"import {module}\n{path}.__dict__.get({fn!r})",
        "getattr": f"import {module}\ngetattr({path}, {fn!r})()",
        "binding": f"import {module}\nclock = {path}.{fn}",
        "from-import": from_import,
        "module-alias": alias,
        "importer": f"__import__({module!r}).{cls + '.' if cls else ''}{fn}()",
        "sys.modules": f"import sys\nsys.modules[{module!r}].{cls + '.' if cls else ''}{fn}",
    }


FORMS = ["attribute", "subscript", "dict-get", "getattr", "binding", "from-import"]
FORMS += ["module-alias", "importer", "sys.modules"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("owner", "fn"), ROOTS, ids=[f"{o}.{f}" for o, f in ROOTS])
def test_every_root_is_seen_in_every_form(owner: str, fn: str, form: str) -> None:
    source = _forms(owner, fn)[form]
    found = unsafe_reads(source)
    module = owner.split(".")[0]
    # random and secrets are flagged wholesale where imported (any import of them reads them)
    named = module if module in ("random", "secrets") else fn
    assert any(named in line for line in found), (source, found)


def test_every_function_of_time_is_either_a_clock_or_known_harmless() -> None:
    public = {n for n in dir(time) if not n.startswith("_") and callable(getattr(time, n))}
    assert public - set(TIME_CLOCKS) - TIME_HARMLESS == set()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time\ntime.__dict__[name]()", ["2: time.__dict__[<computed>]"]),
        ("import time\nns = time.__dict__", ["2: time.__dict__"]),
        ("import time\ntime.__getattribute__('time')()", ["2: time.time"]),
        ("import time\nglobals()['time'].time()", ["2: time.time"]),
        ("x = globals()[name]", ["1: globals()[<computed>]"]),
        ("__builtins__.__import__('time').time()", ["1: time.time"]),
        ("import datetime as d\nd.datetime.__dict__['now']", ["2: datetime.now"]),
    ],
)
def test_the_scan_folds_namespaces_and_globals(source: str, expected: list[str]) -> None:
    assert unsafe_reads(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        "import time\ntime.__dict__['sleep'](0)",
        "import os\nos.__dict__.get('sep')",
        "import datetime\ndatetime.datetime.__dict__['fromisoformat']",
        "def f(time):\n    return globals()['helper'](time)",
    ],
)
def test_namespace_reads_of_harmless_members_are_left_alone(source: str) -> None:
    assert unsafe_reads(source) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # a class attribute of datetime or date (``min``, ``max``) is an instance of the class:
        # its ``now``/``today``/``utcnow`` is the clock
        ("from datetime import datetime\ndatetime.min.now()", ["2: datetime.min.now"]),
        ("from datetime import datetime\ndatetime.max.utcnow()", ["2: datetime.max.utcnow"]),
        ("from datetime import datetime as dt\ndt.min.today()", ["2: datetime.min.today"]),
        ("import datetime\ndatetime.date.min.today()", ["2: date.min.today"]),
        ("import datetime\ndatetime.datetime.max.now()", ["2: datetime.max.now"]),
        ("from datetime import date\ndate.max.min.today()", ["2: date.max.min.today"]),
        ("from datetime import date\ngetattr(date.min, 'today')()", ["2: date.min.today"]),
    ],
)
def test_the_scan_follows_class_attribute_chains_to_the_clock(
    source: str, expected: list[str]
) -> None:
    assert unsafe_reads(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import datetime\nfloor = datetime.min",  # a sentinel value, no clock
        "from datetime import datetime\ndatetime.max.replace(year=2000)",
        "import datetime\nstart = datetime.date.min.isoformat()",
        "from datetime import datetime\ndatetime.resolution.total_seconds()",
    ],
)
def test_class_attributes_used_as_values_are_left_alone(source: str) -> None:
    assert unsafe_reads(source) == []
