"""Run a callback right after a module finishes importing.

`AfterImport(name, callback)` is a `sys.meta_path` finder: it lets the other finders find
`name`, wraps the loader's `exec_module` so that, once the module has run, the finder removes
itself and calls `callback(module)`. Nothing else about the import changes; a failing
callback prints one line and never fails the user's import.

Two users: the bootstrap (load the watcher once `torch` is imported) embeds this class's
source in the generated `sitecustomize.py`, so it uses nothing but `sys`; hf.py (wrap
transformers' enable methods once `transformers.modeling_utils` is imported) imports it.
"""

import sys


class AfterImport:
    def __init__(self, name, callback):
        self.name, self.callback = name, callback

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            try:
                self.callback(module)
            except Exception as exc:
                print(f"ckptlint: could not hook {self.name}: {exc!r}", file=sys.stderr)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            pass
        return spec
