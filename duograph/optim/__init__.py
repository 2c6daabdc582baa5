"""duograph.optim: optimizers (eager ``step`` and graph-mode ``minimize``) and schedulers."""
from . import lr_scheduler
from .optimizer import SGD, Adagrad, Adam, AdamW, Optimizer, RMSprop

from .adaptive import ASGD, Adadelta, Adamax, NAdam, RAdam, Rprop
from .lbfgs import LBFGS

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler",
           "RAdam", "NAdam", "Adadelta", "Adamax", "Rprop", "ASGD", "LBFGS"]
