"""What comes in: documents (PDF, text, stdin) and their token chunks, tokenizers, the chat prompt around them, and
files of questions."""
