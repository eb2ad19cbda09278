"""The numerics of an audited Keras step: where an inf/NaN is made, parameter gradients, the same random numbers in every pass."""
