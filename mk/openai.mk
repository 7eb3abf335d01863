# The openai brain's fake provider: a standalone OpenAI-compatible server
# (tests/fakes/fake_openai.c) that tests/unit/check_brain_openai.c starts as a child.
# The unit runner finds it next to itself (or through $FAKE_OPENAI).

$(BUILD)/tests/fake_openai: $(BUILD)/tests/fakes/fake_openai.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# Order-only: the runner needs the fake built, not linked in.
$(BUILD)/tests/check_unit: | $(BUILD)/tests/fake_openai
all: $(BUILD)/tests/fake_openai
