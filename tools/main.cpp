// placeholder while the tool is written
int main() { return 0; }
