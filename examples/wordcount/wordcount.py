"""Word count as a statekeep function: one counter per word; outputs each word it saw."""


def process(input, context):
    word = input["word"]
    context.incr_counter(word, 1)
    return {"word": word, "count": context.get_counter(word)}
