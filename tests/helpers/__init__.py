"""Helpers the tests share, one module for each thing they help with. Tests import them as `helpers.<module>`:
pytest puts tests/ on sys.path (it holds conftest.py and no __init__.py); conftest.py holds the shared fixtures."""
