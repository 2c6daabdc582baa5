"""duograph.optim: optimizers (eager ``step`` and graph-mode ``minimize``) and schedulers."""
from . import lr_scheduler
from .optimizer import SGD, Adagrad, Adam, AdamW, Optimizer, RMSprop

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
