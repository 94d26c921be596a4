"""The DDD Explorer app's parts, each named for its job (app.py launches them; docs/app.md maps them):

models   the target and head, loaded once and shared    racing    the race as plain data, for this process or a GPU one
sessions one browser tab's state                        examples  the shipped recorded races and their recorder
presets  the tree settings' presets                     layout    the page's components
viewing  callbacks that show a race                     running   callbacks that run, stop and replay one
choosing the model menu                                 page      the page: layout and callbacks wired together
gputime  ZeroGPU's time: what a race asks for, and why it was refused or ended
"""
