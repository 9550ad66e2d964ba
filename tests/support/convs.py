"""What a layer's backprop sees of a 3-D convolution, to compare two forms of it."""


def value_and_grads(conv, x, w, upstream):
    """Output and both gradients of sum(conv(x, w) * upstream): what a layer's backprop sees."""
    import tensorflow as tf  # the test files skip where TensorFlow is missing

    with tf.GradientTape() as tape:
        tape.watch([x, w])
        y = conv(x, w)
        loss = tf.reduce_sum(y * upstream)
    return (y,) + tuple(tape.gradient(loss, [x, w]))
