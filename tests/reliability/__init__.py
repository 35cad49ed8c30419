"""Reliability tests: kill -9 and resume, emulator faults, corrupt and missing data."""
