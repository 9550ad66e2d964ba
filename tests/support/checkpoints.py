"""A training state to checkpoint in the tests: the tiny preset's generator and an epoch counter."""


def generator_state():
    """(generator, tf.train.Checkpoint of it and of an epoch variable at 0)."""
    import tensorflow as tf

    from gan3d.model import generator

    gen = generator("tiny")
    return gen, tf.train.Checkpoint(generator=gen, epoch=tf.Variable(0))
