"""The embedded demo model's data: generated documents with facts hidden in them (`synthetic`), and question-answer
examples cut from them for training (`qa_data`). Not the engine: bench's generated tasks and the demo's recipe use
them."""
