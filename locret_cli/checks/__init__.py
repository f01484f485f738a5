"""Checks on an answer: its content looked up in the document's own words (`grounding.py`)."""
