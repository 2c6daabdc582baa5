"""duograph.eager: eager tensors with an autograd tape that records the same IR."""
