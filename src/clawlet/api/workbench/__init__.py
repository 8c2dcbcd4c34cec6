"""The workbench API of seed 000, mounted under ``/api``."""
