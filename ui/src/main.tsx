import { render } from "preact";
import { App } from "./components/App";
import "./styles/app.css";

render(<App />, document.getElementById("app")!);
