"""The answer's step: one decoded token (eager or compiled whole), the reader in force while answering, where an answer
looked (citations, re-read windows)."""
