"""``ampkit parity``: does mixed precision converge like fp32? (the implementation of the command)"""
