"""The node's configuration keys, declared once: the node's own (`node`), consumer groups' (`groups`),
client security's (`security`) and the console SQL page's (`console_sql`)."""
