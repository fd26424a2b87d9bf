DROP TABLE hook_secrets;
