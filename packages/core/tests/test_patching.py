"""wrap_once: a method of another library wrapped in place, once, in threads too; later wrappers keep the marks."""

import threading

from ember_core import wrap_once, wrapped_by


def counting(calls: list[str], tag: str):
    def wrap(method):
        def wrapper(*args, **kwargs):
            calls.append(tag)
            return method(*args, **kwargs)
        return wrapper
    return wrap


def make_class():
    class Target:
        def area(self, k):
            """The docs."""
            return 2 * k

    class Child(Target):
        pass

    return Target, Child


def test_a_method_is_wrapped_once_however_many_times_it_is_asked():
    Target, _ = make_class()
    calls: list[str] = []
    assert all(wrap_once(Target, "area", counting(calls, "a"), "count") for _ in range(3))
    assert Target().area(4) == 8 and calls == ["a"]
    assert Target.area.__name__ == "area" and Target.area.__doc__ == "The docs."
    assert wrapped_by(Target.area) == {"count"}


def test_two_wrappers_of_their_own_marks_both_go_on_and_keep_each_others_marks():
    Target, _ = make_class()
    calls: list[str] = []
    wrap_once(Target, "area", counting(calls, "inner"), "inner")
    wrap_once(Target, "area", counting(calls, "outer"), "outer")
    wrap_once(Target, "area", counting(calls, "inner"), "inner")  # still there, under outer: not again
    assert Target().area(1) == 2 and calls == ["outer", "inner"]
    assert wrapped_by(Target.area) == {"inner", "outer"}


def test_an_inherited_or_missing_method_is_not_wrapped():
    Target, Child = make_class()
    calls: list[str] = []
    assert not wrap_once(Child, "area", counting(calls, "a"), "count")  # Target's: wrap it there
    assert not wrap_once(Target, "volume", counting(calls, "a"), "count")
    assert "area" not in vars(Child) and Child().area(3) == 6 and calls == []


def test_threads_asking_at_once_wrap_it_once():
    Target, _ = make_class()
    calls: list[str] = []
    start = threading.Barrier(8)

    def ask():
        start.wait()
        wrap_once(Target, "area", counting(calls, "a"), "count")

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    Target().area(0)
    assert calls == ["a"]
