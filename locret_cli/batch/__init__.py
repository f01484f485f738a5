"""`locret batch`: the same questions asked of many documents, each read once, resumable, on local worker
processes or Ray actors.

    jobs = expand_inputs("contracts/*.pdf", "questions.txt")      # inputs.py: what to read and ask
    with AnswerLog.open("answers.jsonl", request) as log:          # answer_log.py: what is done, appended row by row
        summary = run_batch(jobs, log, LocalPool(spec, workers=2))  # runner.py, local_pool.py or ray_pool.py

A worker (work.py) loads the model once, then for each document it is handed reads it once with `Session.read`
and answers each of its questions from a fork of the cache with `Reading.ask`. Rows come back to the driver, which
alone writes the output file.
"""
