"""Code the test labs share (tests/harness/README.md): the daemon lifecycle and ansible-playbook
runs. Importable as `harness` with tests/ on sys.path (tests/conftest.py puts it there under
pytest; a lab module used on its own, by a benchmark or a child process, adds it itself)."""
