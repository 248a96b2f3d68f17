"""The stand-in's error for names it does not provide (see fakes/te_standin/__init__.py)."""


def _error_class():
    try:
        from simdist.fakes.te_standin import TEStandinError
    except ImportError:  # the stand-in's folder imported without simdist's package (never in simdist's runs)
        class TEStandinError(AttributeError):
            pass
    return TEStandinError


TEStandinError = _error_class()


def module_getattr(module_name: str, provided):
    """A module ``__getattr__``: any name not defined raises TEStandinError naming it."""

    def __getattr__(name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # __version__, __file__ probes: as a module without them
        raise TEStandinError(
            f"{module_name}.{name} is not provided by simdist's TransformerEngine stand-in (fakes/te_standin); it "
            f"provides only {', '.join(sorted(provided)) or 'its submodules'}. The real TransformerEngine needs "
            "CUDA to build; code that needs this symbol cannot run on this machine.")

    return __getattr__


def unsupported_class(qualname: str, why: str, base=object):
    """A class that real code may subclass or test with isinstance, whose construction raises TEStandinError."""

    def __init__(self, *args, **kwargs):
        raise TEStandinError(f"{qualname} cannot be created: {why} (simdist's TransformerEngine stand-in, "
                             "fakes/te_standin)")

    name = qualname.rsplit(".", 1)[-1]
    return type(name, (base,), {"__init__": __init__, "__module__": qualname.rsplit(".", 1)[0],
                                "__qualname__": name,
                                "__doc__": f"Stand-in for {qualname}: {why}. Creating one raises TEStandinError."})
