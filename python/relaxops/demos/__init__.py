"""First-run demos on data that ships with installed packages."""


def run_demo(family: str, steps=None) -> None:
    if family == "sort":
        from .sort import main

        main(steps=steps)
    else:
        raise ValueError(f"unknown demo {family!r}; available: sort")
