"""The environment contract: which classes count as the Env class, and the fingerprint that tells a copy from a
variant."""

import ast

from engine.protocol.contract import env_class_name, env_classes

HELPER_FIRST = '''
class Board:
    pass


class CountingEnv:
    def reset(self, seed=None):
        return "", {}
'''


def _names(code):
    return [c.name for c in env_classes(ast.parse(code))]


def test_a_helper_class_before_the_env_class_is_not_the_env():
    assert _names(HELPER_FIRST) == ["CountingEnv"]
    assert env_class_name(HELPER_FIRST) == "CountingEnv"


def test_every_top_level_env_class_is_found_in_order():
    code = "class AEnv:\n    pass\n\nclass Helper:\n    pass\n\nclass BEnv:\n    pass\n"
    assert _names(code) == ["AEnv", "BEnv"]  # the validator rejects this; the name is the first one
    assert env_class_name(code) == "AEnv"


def test_a_nested_or_local_env_class_is_not_counted():
    code = (
        "class Outer:\n    class InnerEnv:\n        pass\n\n"
        "def make():\n    class LocalEnv:\n        pass\n    return LocalEnv\n"
    )
    assert _names(code) == []
    assert env_class_name(code) == "Env"


def test_only_names_ending_in_env_count():
    assert _names("class Environment:\n    pass\n\nclass EnvHelper:\n    pass\n") == []
    assert _names("x = 1\ndef f():\n    return 2\n") == []


def test_no_class_and_a_syntax_error_name_the_fallback():
    assert env_class_name("") == "Env"
    assert env_class_name("import random\n") == "Env"
    assert env_class_name("class BrokenEnv(:\n    pass\n") == "Env"


def test_a_copy_has_the_fingerprint_of_its_original_and_a_variant_does_not():
    from engine.protocol.contract import code_fingerprint

    original = '"""Doc."""\nimport random\n\n\nclass AEnv:\n    N = 3  # size\n\n    def step(self, a):\n        return AEnv.N\n'
    renamed = "import random\nclass OtherEnv:\n    N = 3\n    def step(self, a):\n        '''doc'''\n        return OtherEnv.N\n"
    assert code_fingerprint(original) == code_fingerprint(renamed) is not None  # comments, docstrings, layout, class name
    assert code_fingerprint(original) != code_fingerprint(original.replace("N = 3", "N = 4"))
    assert code_fingerprint(original) != code_fingerprint(original.replace("return AEnv.N", "return -AEnv.N"))
    assert code_fingerprint("def f(:") is None
