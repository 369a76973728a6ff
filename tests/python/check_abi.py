#!/usr/bin/env python3
"""check_abi.py - fails when bindings/python/hvdc/common/library.py, which mirrors hvdc.h by
hand for ctypes, disagrees with it: every status, dtype and reduce op value; the constants; the
size of hvd_options, hvd_elastic_info and hvd_report and each field's offset and size (as the
compiler lays them out: abi_facts prints them). Both directions: a value library.py has that
hvdc.h lacks fails too.

Usage: check_abi.py ABI_FACTS        (the built tests/python/abi_facts; needs libhvdc loadable:
                                      HVDC_LIBRARY, as the suite sets it)
       check_abi.py ABI_FACTS --self-test   (planted disagreements must each be caught)
"""
import ctypes
import subprocess
import sys

PREFIXES = {"status": "", "dtype": "", "op": "", "const": ""}
STRUCTS = {"hvd_options": "Options", "hvd_elastic_info": "ElasticInfo", "hvd_report": "Report"}


def read_facts(program):
    """{kind: {name: value}} and {struct: (size, {field: (offset, size)})} from abi_facts."""
    values, structs = {}, {}
    out = subprocess.run([program], stdout=subprocess.PIPE, text=True, check=True).stdout
    for line in out.splitlines():
        kind, name, *rest = line.split()
        if kind == "struct":
            structs[name] = (int(rest[0]), {})
        elif kind == "field":
            struct, field = name.split(".")
            structs[struct][1][field] = (int(rest[0]), int(rest[1]))
        else:
            values.setdefault(kind, {})[name] = int(rest[0])
    return values, structs


def python_name(c_name):
    """library.py's name for an hvdc.h name: HVD_ERR_MPI -> ERR_MPI, HVD_OK -> OK."""
    return c_name[len("HVD_"):]


def compare(L, values, structs):
    """Every disagreement, as a line."""
    problems = []
    for kind, names in values.items():
        for c_name, value in names.items():
            got = getattr(L, python_name(c_name), None)
            if got != value:
                problems.append("%s %s is %d in hvdc.h, %s in library.py (%s)" %
                                (kind, c_name, value, got, python_name(c_name)))
    statuses = {python_name(n) for n in values.get("status", {})}
    for name in dir(L):  # library.py's statuses that hvdc.h lacks
        if (name == "OK" or name.startswith("ERR_")) and name not in statuses:
            problems.append("status %s is in library.py but not in hvdc.h" % name)
    for c_struct, (size, fields) in structs.items():
        cls = getattr(L, STRUCTS[c_struct])
        if ctypes.sizeof(cls) != size:
            problems.append("%s is %d bytes in hvdc.h, %s %d in library.py" %
                            (c_struct, size, cls.__name__, ctypes.sizeof(cls)))
        py_fields = {f[0] for f in cls._fields_}
        for field, (offset, fsize) in fields.items():
            if field not in py_fields:
                problems.append("%s.%s is missing from library.py's %s" % (c_struct, field, cls.__name__))
                continue
            desc = getattr(cls, field)
            if (desc.offset, desc.size) != (offset, fsize):
                problems.append("%s.%s is at offset %d, %d bytes in hvdc.h; at %d, %d bytes in "
                                "library.py" % (c_struct, field, offset, fsize, desc.offset, desc.size))
        for field in sorted(py_fields - set(fields)):
            problems.append("%s.%s is in library.py but not in hvdc.h" % (cls.__name__, field))
    o = L.Options()  # as HVD_OPTIONS_INIT makes it
    consts = values.get("const", {})
    made = tuple(getattr(o, f, None) for f in ("struct_size", "prescale", "postscale", "device",
                                                "process_set"))
    want = (structs["hvd_options"][0], 1.0, 1.0, consts["HVD_DEVICE_CPU"],
            consts["HVD_PROCESS_SET_GLOBAL"])
    if made != want:
        problems.append("library.py's Options() is (struct_size, prescale, postscale, device, "
                        "process_set) = %s; HVD_OPTIONS_INIT makes %s" % (made, want))
    return problems


def self_test(L, values, structs):
    """Each planted disagreement must be reported."""
    class Swapped(ctypes.Structure):  # two fields in the wrong order
        _fields_ = [(n, t) for n, t in L.ElasticInfo._fields_[::-1]]
    cases = [("a status value", lambda: setattr(L, "ERR_STALLED", 99)),
             ("a status only library.py has", lambda: setattr(L, "ERR_EXTRA", 16)),
             ("a dtype value", lambda: setattr(L, "BOOL", 11)),
             ("an op value", lambda: setattr(L, "ADASUM", 2)),
             ("a field order", lambda: setattr(L, "ElasticInfo", Swapped))]
    for what, plant in cases:
        saved = dict(vars(L))
        plant()
        found = compare(L, values, structs)
        for name in list(vars(L)):
            if name not in saved:
                delattr(L, name)
        for name, value in saved.items():
            setattr(L, name, value)
        if not found:
            print("self-test: %s was not caught" % what)
            return 1
    print("self-test: OK (%d planted disagreements caught)" % len(cases))
    return 0


def main(argv):
    from hvdc.common import library as L
    values, structs = read_facts(argv[1])
    if argv[2:] == ["--self-test"]:
        return self_test(L, values, structs)
    problems = compare(L, values, structs)
    for p in problems:
        print("check_abi: " + p)
    n = sum(len(v) for v in values.values()) + sum(len(f) + 1 for _, f in structs.values())
    print("check_abi: %d facts of hvdc.h compared with library.py, %d disagree" % (n, len(problems)))
    if problems:
        print("check_abi: change library.py to match hvdc.h (the C header is the truth)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
