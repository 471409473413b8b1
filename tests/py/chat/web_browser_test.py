"""`nfn serve`'s page in a real headless Chromium (Debian's chromium and chromium-driver, driven
by Selenium) against a tiny random nanochat model that hands on a token every 80 ms: typing a
message and pressing Enter streams the answer into the page (its text grows while it streams)
and the answer is a greedy ChatSession's; markup in a message shows as literal text; a second
turn carries the conversation (answered as a fresh engine answers render.py's rendering of it);
New chat clears the page and, mid-answer, stops the generation. The screenshot goes to Bazel's undeclared outputs (and to $NFN_CHAT_WEB_SCREENSHOT when set:
docs/images/chat_web.png is made so)."""
import os
import shutil
import tempfile
import time
import unittest

from nfn import _native
from nfn.chat.formats import chat_format
from nfn.chat.render import render_for_completion
from nfn.chat.session import ChatSession
from tiny_chat import CFG, set_up, start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
DELAY, MAX_TOKENS = 0.08, 24
MARKUP = "Say <b>x</b> & <img src=x onerror=\"document.title='owned'\">"


@unittest.skipUnless(CHROMIUM and CHROMEDRIVER, "Debian's chromium and chromium-driver are not installed "
                                                "(tools/bootstrap.sh installs them)")
class WebBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        cls.tmp = tempfile.mkdtemp()
        cls.env, cls.model, cls.tok = set_up(cls.tmp)
        cls.server, _ = start_server(cls.model, cls.tok, {"temperature": 0.0, "top_k": 0, "max_tokens": MAX_TOKENS},
                                     delay=DELAY)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=820,560", f"--user-data-dir={os.path.join(cls.tmp, 'profile')}"):
            options.add_argument(flag)
        cls.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.server.shutdown()
        cls.server.server_close()
        shutil.rmtree(cls.tmp)

    def reference(self, text):
        """A fresh ChatSession's greedy answer to a first message (the text it streams)."""
        engine = _native.InferenceEngine(weights_file=self.model)
        session = ChatSession(engine, self.tok, chat_format(self.tok, "chat512"), CFG["max_seq_len"],
                              temperature=0.0, top_k=0, max_new_tokens=MAX_TOKENS)
        pieces = []
        session.ask(text, pieces.append)
        return "".join(pieces)

    def rendered_reference(self, conversation):
        """A fresh engine's greedy answer to render.py's rendering of a conversation (texts, user first):
        what the server answers, as the page sends the conversation back as text."""
        messages = [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(conversation)]
        stop = self.tok.special_id("<|assistant_end|>")
        out = _native.InferenceEngine(weights_file=self.model).generate(
            render_for_completion(self.tok, {"messages": messages}), MAX_TOKENS, temperature=0.0, stop_token=stop)
        return self.tok.decode([t for t in out["tokens"] if t != stop])

    def js(self, script):
        return self.driver.execute_script(script)

    def until(self, condition, timeout=30, what="the page"):
        deadline = time.time() + timeout
        while not condition():
            self.assertLess(time.time(), deadline, f"timed out waiting for {what}")
            time.sleep(0.03)

    def send(self, text):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys
        box = self.driver.find_element(By.ID, "input")
        box.send_keys(text)
        box.send_keys(Keys.ENTER)

    def watch_reply(self, index):
        """The lengths the index-th reply's text had while it streamed, until it finished."""
        lengths = []
        deadline = time.time() + 60
        while True:
            state = self.js(f"const r = document.querySelectorAll('.message.assistant')[{index}];"
                            "return r ? [r.textContent.length, r.classList.contains('streaming')] : null;")
            if state is not None:
                lengths.append(state[0])
                if not state[1]:
                    return lengths
            self.assertLess(time.time(), deadline, "the reply did not finish")
            time.sleep(0.02)

    def texts(self, selector):
        return self.js(f"return [...document.querySelectorAll('{selector}')].map(e => e.textContent);")

    def test_chat_in_the_page(self):
        from selenium.webdriver.common.by import By
        d = self.driver
        d.get(self.server.url)
        self.until(lambda: "tiny-nanochat" in d.find_element(By.ID, "model").text, what="the model's name")
        self.assertIn("nanochat, cpu", d.find_element(By.ID, "model").text)
        first = self.reference(MARKUP)

        # Enter sends; the answer streams in: its text grows over several steps, then is the whole answer.
        self.send(MARKUP)
        lengths = self.watch_reply(0)
        self.assertGreaterEqual(len({n for n in lengths if 0 < n < len(first)}), 3, lengths)
        self.assertEqual(self.texts(".message.assistant"), [first])
        # Markup a user typed is text: no element was made of it, and its handler never ran.
        self.assertEqual(self.texts(".message.user"), [MARKUP])
        self.assertEqual(d.find_elements(By.CSS_SELECTOR, "#messages b, #messages img"), [])
        self.assertNotEqual(d.title, "owned")
        self.assertEqual(self.js("return document.querySelector('.message.user').childNodes.length"), 1)

        # A second turn carries the conversation (the server would refuse a malformed one).
        self.send("And then?")
        self.watch_reply(1)
        second = self.rendered_reference([MARKUP, first, "And then?"])
        self.assertEqual(self.texts(".message.assistant"), [first, second])
        self.assertEqual(self.texts(".error"), [])
        self.screenshot()

        # New chat clears the page.
        d.find_element(By.ID, "new-chat").click()
        self.until(lambda: self.js("return document.getElementById('messages').children.length") == 0,
                   what="New chat to clear the messages")

        # New chat in the middle of an answer stops its generation at once and frees the server.
        chat = self.server.chat
        self.send("Tell me a story.")
        self.until(lambda: (self.js("const r = document.querySelector('.message.assistant');"
                                    "return r ? r.textContent.length : 0") > 0), what="the first token")
        d.find_element(By.ID, "new-chat").click()
        left = time.time()
        self.until(lambda: not chat.lock.locked() and chat.pending == 0, timeout=MAX_TOKENS * DELAY,
                   what="the server to let go of the engine")
        self.assertLess(time.time() - left, MAX_TOKENS * DELAY / 2)
        prompt = len(chat.session.fmt.turn("Tell me a story.", True))
        self.assertLess(len(chat.session.tokens) - prompt, MAX_TOKENS // 2)
        self.assertEqual(self.js("return document.getElementById('messages').children.length"), 0)
        # And the page goes on working.
        self.send("Hello again.")
        self.watch_reply(0)
        self.assertEqual(self.texts(".message.assistant"), [self.reference("Hello again.")])

    def screenshot(self):
        outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        for path in (outputs and os.path.join(outputs, "chat_web.png"), os.environ.get("NFN_CHAT_WEB_SCREENSHOT")):
            if path:
                self.assertTrue(self.driver.save_screenshot(path), path)


if __name__ == "__main__":
    unittest.main()
